/*
 * rks_internal.h - what the three C files of _rks_native share.
 *
 *   rks_native.c    the module: load() (librdkafka resolved with dlopen/dlsym),
 *                   Arrow column parsing and bounds checks, typed-array checks,
 *                   the module table and PyInit;
 *   rks_producer.c  the Producer type;
 *   rks_hash.c      XXH64, fingerprints_into, unit_digest and the Occurrences type.
 *
 * Everything declared here has hidden visibility: the only symbol the shared
 * object exports is PyInit__rks_native.
 */
#ifndef RKS_INTERNAL_H
#define RKS_INTERNAL_H

#define PY_SSIZE_T_CLEAN
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000 /* stable ABI: one build serves CPython 3.11+ */
#endif
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "rks_rdkafka.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "_rks_native supports little-endian hosts only (Arrow buffers are read in place)"
#endif
_Static_assert(sizeof(void *) == 8, "msg_opaque packs 64 bits into a pointer");

#pragma GCC visibility push(hidden)

/* librdkafka functions, resolved by load() (rks_native.c). */
#define RKS_DECL_FN(name, ret, args) ret(*name) args;
struct rks_api { RKS_FN_LIST(RKS_DECL_FN) };
extern struct rks_api rk_api;
extern void *rk_lib; /* dlopen handle, NULL until load() succeeded */
#define RK(name) (rk_api.name)

/* Raise ValueError(fmt, ...) and jump to the cleanup label. */
#define BAD(label, ...)                                                                            \
    do {                                                                                           \
        PyErr_Format(PyExc_ValueError, __VA_ARGS__);                                               \
        goto label;                                                                                \
    } while (0)

/* Text from librdkafka as str, never failing on bad UTF-8 (n < 0: NUL-terminated). */
PyObject *ustr(const char *s, Py_ssize_t n);

/* ------------------------------------------------------------------------ */
/* Arrow columns: (length, offset, validity|None, buf1|None, buf2|None, width) */

enum { K_BIN, K_INT, K_LIST, K_STRUCT };
extern const char EMPTY[1];

typedef struct {
    int present;
    Py_ssize_t len, off;
    const uint8_t *valid, *b1, *b2;
    Py_ssize_t vlen, b1len, b2len;
    int width;
    int64_t last; /* K_BIN/K_LIST: offsets[off+len] */
    Py_buffer views[3];
    int nviews;
} col_t;

/* A headers column: list<struct<key: string, value: binary>>. */
typedef struct {
    col_t list, st, key, val;
    int present;
} hcol_t;

void col_release(col_t *c);
/* A read-only buffer of o held in c (None -> NULL, 0). */
int getbuf(col_t *c, PyObject *o, const uint8_t **p, Py_ssize_t *n);
/* Parse and bounds-check one column tuple; None -> absent.  `what` names it in errors. */
int col_parse(PyObject *o, col_t *c, int kind, const char *what);
void hcol_release(hcol_t *h);
int hcol_parse(PyObject *o, hcol_t *h);
/* ValueError unless an present column has n rows. */
int check_len(const col_t *c, Py_ssize_t n, const char *what);

static inline int64_t ld_off(const uint8_t *p, int w, Py_ssize_t k) {
    if (w == 4) {
        int32_t v;
        memcpy(&v, p + 4 * k, 4);
        return v;
    }
    int64_t v;
    memcpy(&v, p + 8 * k, 8);
    return v;
}

static inline int col_null(const col_t *c, Py_ssize_t i) {
    if (!c->valid) return 0;
    Py_ssize_t j = c->off + i;
    return !((c->valid[j >> 3] >> (j & 7)) & 1);
}

/* Bytes of row i of a K_BIN column (call only for a non-null row). */
static inline const char *col_bin(const col_t *c, Py_ssize_t i, size_t *n) {
    Py_ssize_t k = c->off + i;
    int64_t a = ld_off(c->b1, c->width, k), b = ld_off(c->b1, c->width, k + 1);
    *n = (size_t)(b - a);
    return c->b2 ? (const char *)c->b2 + a : EMPTY;
}

static inline int64_t col_int(const col_t *c, Py_ssize_t i) {
    return ld_off(c->b1, c->width, c->off + i);
}

static inline void hcol_range(const hcol_t *h, Py_ssize_t i, int64_t *a, int64_t *b) {
    Py_ssize_t k = h->list.off + i;
    *a = ld_off(h->list.b1, h->list.width, k);
    *b = ld_off(h->list.b1, h->list.width, k + 1);
}

/* ------------------------------------------------------------------------ */
/* Typed arrays (numpy uint64/uint32, array.array('Q'/'I'))                 */

/*
 * A C-contiguous 1-d buffer of unsigned integers of `itemsize` bytes (4 or 8) in
 * native byte order, read-only or writable; nrows == -1 accepts any length, else
 * the length must be nrows.  TypeError/ValueError naming `what` otherwise.  On
 * success the view is held (PyBuffer_Release it); v->len / itemsize is the length.
 */
int get_uint_array(PyObject *o, Py_buffer *v, int itemsize, int writable, Py_ssize_t nrows,
                   const char *what);

/* A new numpy.empty(n, dtype) (numpy imported on first use). */
PyObject *numpy_empty(Py_ssize_t n, const char *dtype);

/* ------------------------------------------------------------------------ */
/* What the other files give the module table                               */

extern PyType_Spec Producer_spec;    /* rks_producer.c */
extern PyType_Spec Occurrences_spec; /* rks_hash.c */
PyObject *mod_fingerprints_into(PyObject *m, PyObject *args);
PyObject *mod_xxh64(PyObject *m, PyObject *args);
PyObject *mod_unit_digest(PyObject *m, PyObject *args, PyObject *kw);
void rks_crc_init(void);                                       /* rks_crc.c, once at module load */
PyObject *mod_crc32(PyObject *m, PyObject *args);
PyObject *mod_crc32_hardware(PyObject *m, PyObject *noargs);

#pragma GCC visibility pop

#endif /* RKS_INTERNAL_H */
