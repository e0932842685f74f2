/*
 * _rks_native: the native produce path of spark_recoverable_sink.
 *
 * The extension is three C files compiled together (shared declarations in
 * rks_internal.h, librdkafka's in rks_rdkafka.h):
 *   rks_native.c    this file: load(path), which resolves librdkafka's public
 *                   C API at run time (dlopen/dlsym) from the copy shipped with
 *                   confluent-kafka (nothing is linked at build time); Arrow
 *                   column parsing and bounds checks; typed-array checks; the
 *                   module table;
 *   rks_producer.c  Producer: produce_chunk (one chunk of Arrow rows per call,
 *                   loop in C, GIL released), delivery reports counted per
 *                   round in C, transactions;
 *   rks_hash.c      xxh64, fingerprints_into, unit_digest, Occurrences.
 *
 * Arrow columns arrive already split into buffers by native/library.py, as
 * tuples (length, offset, validity|None, buf1|None, buf2|None, width):
 *   binary/string: buf1 = offsets (width 4 or 8 bytes), buf2 = data
 *   int32/int64:   buf1 = values (width 4 or 8)
 *   list:          buf1 = offsets (width 4 or 8)
 *   struct:        validity only
 * Every buffer is held through the buffer protocol and bounds-checked before
 * any row is read; malformed input raises ValueError.
 */
#include "rks_internal.h"

#include <dlfcn.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------ */
/* librdkafka functions, resolved by load()                                 */

struct rks_api rk_api;
void *rk_lib; /* kept for the life of the process */

static PyObject *mod_load(PyObject *m, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s:load", &path)) return NULL;
    if (rk_lib) return PyUnicode_FromString(RK(rd_kafka_version_str)());
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        PyErr_Format(PyExc_ImportError, "cannot load librdkafka from %s: %s", path, e ? e : "?");
        return NULL;
    }
    void *sym;
    const char *missing = NULL;
#define RKS_RESOLVE(name, ret, args)                                                               \
    if (!missing && !(sym = dlsym(h, #name))) missing = #name;                                     \
    if (!missing) memcpy(&rk_api.name, &sym, sizeof sym);
    RKS_FN_LIST(RKS_RESOLVE)
#undef RKS_RESOLVE
    if (missing) {
        PyErr_Format(PyExc_ImportError,
                     "librdkafka at %s lacks the symbol %s (librdkafka 2.0 or later needed)", path,
                     missing);
    } else if (RK(rd_kafka_version)() < 0x02000000) {
        PyErr_Format(PyExc_ImportError, "librdkafka at %s is %s; 2.0 or later is needed", path,
                     RK(rd_kafka_version_str)());
    } else {
        rk_lib = h;
        return PyUnicode_FromString(RK(rd_kafka_version_str)());
    }
    dlclose(h);
    memset(&rk_api, 0, sizeof rk_api);
    return NULL;
}


PyObject *ustr(const char *s, Py_ssize_t n) {
    if (!s) s = "", n = 0;
    if (n < 0) n = (Py_ssize_t)strlen(s);
    return PyUnicode_DecodeUTF8(s, n, "replace");
}

/* ------------------------------------------------------------------------ */
/* Arrow columns                                                            */

const char EMPTY[1] = "";

void col_release(col_t *c) {
    for (int i = 0; i < c->nviews; i++) PyBuffer_Release(&c->views[i]);
    c->nviews = 0;
}

int getbuf(col_t *c, PyObject *o, const uint8_t **p, Py_ssize_t *n) {
    *p = NULL;
    *n = 0;
    if (o == Py_None) return 0;
    Py_buffer *v = &c->views[c->nviews];
    if (PyObject_GetBuffer(o, v, PyBUF_SIMPLE) < 0) return -1;
    c->nviews++;
    *p = (const uint8_t *)v->buf;
    *n = v->len;
    return 0;
}

/* Parse and bounds-check one column tuple; None -> absent.  `what` names it in errors. */
int col_parse(PyObject *o, col_t *c, int kind, const char *what) {
    memset(c, 0, sizeof *c);
    if (o == Py_None) return 0;
    PyObject *vo, *b1o, *b2o;
    if (!PyTuple_Check(o) ||
        !PyArg_ParseTuple(o, "nnOOOi", &c->len, &c->off, &vo, &b1o, &b2o, &c->width)) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError,
                         "%s: expected (length, offset, validity, buf1, buf2, width)", what);
        }
        return -1;
    }
    c->present = 1;
    if (getbuf(c, vo, &c->valid, &c->vlen) < 0 || getbuf(c, b1o, &c->b1, &c->b1len) < 0 ||
        getbuf(c, b2o, &c->b2, &c->b2len) < 0)
        goto fail;
    if (c->len < 0 || c->off < 0 || c->off > PY_SSIZE_T_MAX / 16 - c->len)
        BAD(fail, "%s: length/offset out of range", what);
    Py_ssize_t end = c->off + c->len;
    if (c->valid && c->len > 0 && c->vlen < (end + 7) / 8)
        BAD(fail, "%s: validity bitmap too short (%zd bytes for %zd rows)", what, c->vlen, end);
    if (kind == K_STRUCT || c->len == 0) return 0;
    if (c->width != 4 && c->width != 8) BAD(fail, "%s: width must be 4 or 8", what);
    if (kind == K_INT) {
        if (c->b1len / c->width < end) BAD(fail, "%s: value buffer too short", what);
        return 0;
    }
    if (c->b1len / c->width < end + 1) BAD(fail, "%s: offsets buffer too short", what);
    int64_t prev = ld_off(c->b1, c->width, c->off);
    if (prev < 0) BAD(fail, "%s: negative offset", what);
    for (Py_ssize_t k = c->off + 1; k <= end; k++) {
        int64_t cur = ld_off(c->b1, c->width, k);
        if (cur < prev) BAD(fail, "%s: offsets not monotonic at slot %zd", what, k);
        prev = cur;
    }
    c->last = prev;
    if (kind == K_BIN && prev > c->b2len)
        BAD(fail, "%s: offsets point past the end of the data (%lld > %zd)", what, (long long)prev,
            c->b2len);
    return 0;
fail:
    col_release(c);
    c->present = 0;
    return -1;
}


void hcol_release(hcol_t *h) {
    col_release(&h->list), col_release(&h->st), col_release(&h->key), col_release(&h->val);
}

int hcol_parse(PyObject *o, hcol_t *h) {
    memset(h, 0, sizeof *h);
    if (o == Py_None) return 0;
    PyObject *lo, *so, *ko, *vo;
    if (!PyTuple_Check(o) || !PyArg_ParseTuple(o, "OOOO", &lo, &so, &ko, &vo)) {
        PyErr_Clear();
        BAD(fail, "headers: expected (list, struct, key, value) columns");
    }
    if (lo == Py_None || so == Py_None || ko == Py_None || vo == Py_None)
        BAD(fail, "headers: every part must be given");
    if (col_parse(lo, &h->list, K_LIST, "headers list") < 0 ||
        col_parse(so, &h->st, K_STRUCT, "headers struct") < 0 ||
        col_parse(ko, &h->key, K_BIN, "headers key") < 0 ||
        col_parse(vo, &h->val, K_BIN, "headers value") < 0)
        goto fail;
    if (h->list.len > 0 && h->list.last > h->st.len)
        BAD(fail, "headers: list offsets point past the struct entries");
    if (h->key.len < h->st.len || h->val.len < h->st.len)
        BAD(fail, "headers: key/value columns shorter than the entries");
    h->present = 1;
    return 0;
fail:
    hcol_release(h);
    return -1;
}

int check_len(const col_t *c, Py_ssize_t n, const char *what) {
    if (c->present && c->len != n) {
        PyErr_Format(PyExc_ValueError, "%s has %zd rows, expected %zd", what, c->len, n);
        return -1;
    }
    return 0;
}


/* ------------------------------------------------------------------------ */
/* Typed arrays                                                             */

int get_uint_array(PyObject *o, Py_buffer *v, int itemsize, int writable, Py_ssize_t nrows,
                   const char *what) {
    int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, v, flags) < 0) {
        if (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_TypeError) ||
            PyErr_ExceptionMatches(PyExc_ValueError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s must be a contiguous%s 1-d uint%d array", what,
                         writable ? ", writable" : "", itemsize * 8);
        }
        return -1;
    }
    const char *f = v->format ? v->format : "B";
    if (*f == '@' || *f == '=' || *f == '<') f++; /* native or little-endian order */
    if (v->ndim != 1 || v->itemsize != itemsize || !f[0] || f[1] || !strchr("HILQ", f[0])) {
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous 1-d uint%d array (got format %s, "
                     "itemsize %zd, ndim %d)", what, itemsize * 8, v->format ? v->format : "B",
                     v->itemsize, v->ndim);
        PyBuffer_Release(v);
        return -1;
    }
    if (nrows >= 0 && v->len != nrows * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s has %zd rows, expected %zd", what, v->len / itemsize,
                     nrows);
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

PyObject *numpy_empty(Py_ssize_t n, const char *dtype) {
    static PyObject *empty; /* numpy.empty, kept for the life of the process */
    if (!empty) {
        PyObject *np = PyImport_ImportModule("numpy");
        if (!np) return NULL;
        empty = PyObject_GetAttrString(np, "empty");
        Py_DECREF(np);
        if (!empty) return NULL;
    }
    return PyObject_CallFunction(empty, "ns", n, dtype);
}

/* ------------------------------------------------------------------------ */
/* The module                                                               */

static PyMethodDef mod_methods[] = {
    {"load", mod_load, METH_VARARGS, "load(path) -> librdkafka version string"},
    {"fingerprints_into", mod_fingerprints_into, METH_VARARGS,
     "fingerprints_into(out, values, keys, topics, partitions, timestamps, headers)"},
    {"xxh64", mod_xxh64, METH_VARARGS, "xxh64(data, seed=0) -> int"},
    {"unit_digest", (PyCFunction)(void (*)(void))mod_unit_digest, METH_VARARGS | METH_KEYWORDS,
     "unit_digest(fps: uint64 array, occs: uint32 array, seed=0) -> int: (seed + sum of "
     "avalanche(fp ^ occ * 0x9E3779B97F4A7C15)) mod 2**64, independent of row order"},
    {"crc32", mod_crc32, METH_VARARGS, "crc32(data, crc=0) -> int: zlib.crc32's value"},
    {"crc32_hardware", mod_crc32_hardware, METH_NOARGS, "crc32_hardware() -> bool: folded with PCLMULQDQ"},
    {NULL}};

static struct PyModuleDef rks_module = {PyModuleDef_HEAD_INIT, "_rks_native",
                                        "Native Kafka produce path of spark_recoverable_sink.", -1,
                                        mod_methods};

static int add_type(PyObject *m, PyType_Spec *spec, const char *name) {
    PyObject *t = PyType_FromSpec(spec);
    if (!t || PyModule_AddObject(m, name, t) < 0) {
        Py_XDECREF(t);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__rks_native(void) {
    rks_crc_init();
    PyObject *m = PyModule_Create(&rks_module);
    if (!m) return NULL;
    if (add_type(m, &Producer_spec, "Producer") < 0 ||
        add_type(m, &Occurrences_spec, "Occurrences") < 0 ||
        PyModule_AddIntConstant(m, "QUEUE_FULL", RKS_ERR__QUEUE_FULL) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
