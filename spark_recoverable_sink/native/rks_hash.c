/*
 * rks_hash.c - XXH64, row fingerprints, unit digests and the occurrence counter.
 *
 *   xxh64(data, seed)             XXH64, written from the xxHash specification;
 *   fingerprints_into(out, ...)   per-row 64-bit fingerprints (XXH64 per column,
 *                                 folded), written into a caller-supplied buffer;
 *   unit_digest(fps, occs, seed)  order-independent digest of (fingerprint,
 *                                 occurrence) pairs: seed + sum mix(f, o) mod 2**64;
 *   Occurrences                   per row, how many earlier rows (over all calls)
 *                                 had the same fingerprint: an open-addressing
 *                                 hash table uint64 -> count, moved to a mapped
 *                                 file once it outgrows spill_above bytes.
 * The loops run with the GIL released.
 */
#include "rks_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

/* XXH64 (from the xxHash specification) and row fingerprints              */

#define XP1 0x9E3779B185EBCA87ULL
#define XP2 0xC2B2AE3D27D4EB4FULL
#define XP3 0x165667B19E3779F9ULL
#define XP4 0x85EBCA77C2B2AE63ULL
#define XP5 0x27D4EB2F165667C5ULL
#define GOLDEN 0x9E3779B97F4A7C15ULL

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t xround(uint64_t acc, uint64_t lane) {
    return rotl64(acc + lane * XP2, 31) * XP1;
}
static inline uint64_t xmerge(uint64_t acc, uint64_t v) { return (acc ^ xround(0, v)) * XP1 + XP4; }
static inline uint64_t xavalanche(uint64_t h) {
    h ^= h >> 33;
    h *= XP2;
    h ^= h >> 29;
    h *= XP3;
    return h ^ (h >> 32);
}

static uint64_t xxh64(const void *data, size_t len, uint64_t seed) {
    const uint8_t *p = len ? (const uint8_t *)data : (const uint8_t *)EMPTY, *end = p + len;
    uint64_t h;
    if (len >= 32) {
        uint64_t a1 = seed + XP1 + XP2, a2 = seed + XP2, a3 = seed, a4 = seed - XP1;
        do {
            a1 = xround(a1, rd64(p));
            a2 = xround(a2, rd64(p + 8));
            a3 = xround(a3, rd64(p + 16));
            a4 = xround(a4, rd64(p + 24));
            p += 32;
        } while (end - p >= 32);
        h = rotl64(a1, 1) + rotl64(a2, 7) + rotl64(a3, 12) + rotl64(a4, 18);
        h = xmerge(xmerge(xmerge(xmerge(h, a1), a2), a3), a4);
    } else {
        h = seed + XP5;
    }
    h += (uint64_t)len;
    for (; end - p >= 8; p += 8) h = rotl64(h ^ xround(0, rd64(p)), 27) * XP1 + XP4;
    if (end - p >= 4) {
        h = rotl64(h ^ ((uint64_t)rd32(p) * XP1), 23) * XP2 + XP3;
        p += 4;
    }
    for (; p < end; p++) h = rotl64(h ^ ((uint64_t)*p * XP5), 11) * XP1;
    return xavalanche(h);
}

static inline uint64_t fold(uint64_t acc, uint64_t h) {
    return rotl64(acc ^ (h * XP2), 31) * GOLDEN + XP4;
}

/* Canonical bytes of row i's headers, into a growing scratch buffer. */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} scratch_t;

static int scratch_put(scratch_t *s, const void *d, size_t n) {
    if (s->n + n > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->n + n) cap *= 2;
        uint8_t *q = realloc(s->p, cap);
        if (!q) return -1;
        s->p = q;
        s->cap = cap;
    }
    if (n) memcpy(s->p + s->n, d, n);
    s->n += n;
    return 0;
}

static int headers_canonical(const hcol_t *h, Py_ssize_t i, scratch_t *s) {
    int64_t a, b;
    hcol_range(h, i, &a, &b);
    s->n = 0;
    for (int64_t j = a; j < b; j++) {
        if (col_null(&h->st, j)) continue;
        size_t kn = 0, vn = 0;
        const char *k = col_null(&h->key, j) ? EMPTY : col_bin(&h->key, j, &kn);
        uint32_t kl = (uint32_t)kn;
        if (scratch_put(s, &kl, 4) < 0 || scratch_put(s, k, kn) < 0) return -1;
        if (col_null(&h->val, j)) {
            int32_t m1 = -1;
            if (scratch_put(s, &m1, 4) < 0) return -1;
        } else {
            const char *v = col_bin(&h->val, j, &vn);
            int32_t vl = (int32_t)vn;
            if (scratch_put(s, &vl, 4) < 0 || scratch_put(s, v, vn) < 0) return -1;
        }
    }
    return 0;
}

static void fp_column(uint64_t *acc, Py_ssize_t n, const col_t *c, int is_int, uint64_t seed) {
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t h;
        if (col_null(c, i)) {
            h = GOLDEN ^ seed;
        } else if (is_int) {
            int64_t v = col_int(c, i);
            h = xxh64(&v, 8, seed);
        } else {
            size_t len;
            const char *p = col_bin(c, i, &len);
            h = xxh64(p, len, seed);
        }
        acc[i] = fold(acc[i], h);
    }
}

PyObject *mod_fingerprints_into(PyObject *m, PyObject *args) {
    PyObject *out_o, *vo, *ko, *to, *po, *tso, *ho;
    if (!PyArg_ParseTuple(args, "OOOOOOO:fingerprints_into", &out_o, &vo, &ko, &to, &po, &tso, &ho))
        return NULL;
    col_t val = {0}, key = {0}, top = {0}, part = {0}, ts = {0};
    hcol_t hd = {0};
    Py_buffer out = {0};
    PyObject *ret = NULL;
    if (PyObject_GetBuffer(out_o, &out, PyBUF_WRITABLE) < 0) return NULL;
    if (col_parse(vo, &val, K_BIN, "values") < 0 || col_parse(ko, &key, K_BIN, "keys") < 0 ||
        col_parse(to, &top, K_BIN, "topics") < 0 || col_parse(po, &part, K_INT, "partitions") < 0 ||
        col_parse(tso, &ts, K_INT, "timestamps") < 0 || hcol_parse(ho, &hd) < 0)
        goto done;
    Py_ssize_t n = val.present ? val.len : key.present ? key.len : top.present ? top.len
                 : part.present ? part.len : ts.present ? ts.len : hd.present ? hd.list.len : -1;
    if (n < 0) BAD(done, "fingerprints: no column given");
    if (check_len(&val, n, "values") < 0 || check_len(&key, n, "keys") < 0 ||
        check_len(&top, n, "topics") < 0 || check_len(&part, n, "partitions") < 0 ||
        check_len(&ts, n, "timestamps") < 0 || check_len(&hd.list, n, "headers") < 0)
        goto done;
    if (out.len != n * 8)
        BAD(done, "fingerprints: output buffer is %zd bytes, expected %zd", out.len, n * 8);
    uint64_t *acc = (uint64_t *)out.buf; /* numpy buffers are 8-byte aligned */
    if (((uintptr_t)acc & 7) != 0) BAD(done, "fingerprints: output buffer is not 8-byte aligned");
    int oom = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) acc[i] = XP5;
    if (top.present) fp_column(acc, n, &top, 0, 1);
    if (part.present) fp_column(acc, n, &part, 1, 2);
    if (key.present) fp_column(acc, n, &key, 0, 3);
    if (val.present) fp_column(acc, n, &val, 0, 4);
    if (hd.present) {
        scratch_t s = {0};
        for (Py_ssize_t i = 0; i < n && !oom; i++) {
            uint64_t h;
            if (col_null(&hd.list, i)) {
                h = GOLDEN ^ 5;
            } else if (headers_canonical(&hd, i, &s) < 0) {
                oom = 1;
                break;
            } else {
                h = xxh64(s.p, s.n, 5);
            }
            acc[i] = fold(acc[i], h);
        }
        free(s.p);
    }
    if (ts.present) fp_column(acc, n, &ts, 1, 6);
    for (Py_ssize_t i = 0; i < n; i++) acc[i] = xavalanche(acc[i]);
    Py_END_ALLOW_THREADS
    ret = oom ? PyErr_NoMemory() : Py_NewRef(Py_None);
done:
    col_release(&val), col_release(&key), col_release(&top), col_release(&part), col_release(&ts);
    hcol_release(&hd);
    PyBuffer_Release(&out);
    return ret;
}

/* ------------------------------------------------------------------------ */
PyObject *mod_xxh64(PyObject *m, PyObject *args) {
    Py_buffer b;
    unsigned long long seed = 0;
    if (!PyArg_ParseTuple(args, "y*|K:xxh64", &b, &seed)) return NULL;
    uint64_t h = xxh64(b.buf, (size_t)b.len, seed);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLongLong(h);
}

/* ------------------------------------------------------------------------ */
/* unit_digest                                                              */

/* mix(f, o): XXH64's final avalanche of f ^ (o * GOLDEN mod 2**64). */
static inline uint64_t pair_mix(uint64_t fp, uint32_t occ) {
    return xavalanche(fp ^ ((uint64_t)occ * GOLDEN));
}

PyObject *mod_unit_digest(PyObject *m, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"fps", "occs", "seed", NULL};
    PyObject *fo, *oo, *so = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:unit_digest", kwlist, &fo, &oo, &so))
        return NULL;
    uint64_t seed = 0;
    if (so) { /* any int, taken mod 2**64 (a digest is a residue) */
        PyObject *ix = PyNumber_Index(so);
        if (!ix) return NULL;
        seed = (uint64_t)PyLong_AsUnsignedLongLongMask(ix);
        Py_DECREF(ix);
        if (PyErr_Occurred()) return NULL;
    }
    Py_buffer fv, ov;
    if (get_uint_array(fo, &fv, 8, 0, -1, "fps") < 0) return NULL;
    Py_ssize_t n = fv.len / 8;
    if (get_uint_array(oo, &ov, 4, 0, n, "occs") < 0) {
        PyBuffer_Release(&fv);
        return NULL;
    }
    const uint8_t *f = fv.buf, *o = ov.buf;
    uint64_t acc = seed;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) acc += pair_mix(rd64(f + 8 * i), rd32(o + 4 * i));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&fv);
    PyBuffer_Release(&ov);
    return PyLong_FromUnsignedLongLong(acc);
}

/* ------------------------------------------------------------------------ */
/* Occurrences: an open-addressing (linear probing) table uint64 -> count   */

/*
 * A slot is empty when its count is 0: a stored key always has count >= 1, so
 * every uint64 (0 and 2**64-1 included) can be a key.  The capacity is a power
 * of two; the home slot is the top bits of key * GOLDEN (Fibonacci hashing:
 * well spread even for sequential keys).  The table doubles before an insert
 * would take it past 7/10 full.
 */
typedef struct {
    uint64_t key;
    uint64_t count; /* occurrences seen; 0 = empty slot */
} occ_slot_t;

typedef struct {
    PyObject_HEAD
    occ_slot_t *tab;
    size_t cap;   /* 0 or a power of two */
    int shift;    /* 64 - log2(cap) */
    size_t used;  /* distinct keys */
    int busy;     /* a number() call is running (GIL released) */
    int broken;   /* a call failed half-way: the counts are incomplete */
    int mapped;   /* tab maps an unlinked file in spill_dir (not heap memory) */
    char *spill_dir;    /* NULL: the table stays in memory */
    size_t spill_above; /* bytes: a larger table is a file mapping */
    int err;            /* errno of the last failed spill */
} Occurrences;

#define OCC_MIN_CAP 1024
#define OCC_PREFETCH 16 /* rows ahead: random probes of a large table overlap their cache misses */

static inline size_t occ_home(const Occurrences *o, uint64_t key) {
    return (size_t)((key * GOLDEN) >> o->shift);
}

/*
 * File systems where a posix_fallocate'd block is written back in place, so
 * a dirty page of the table can always be written back (ext2/3/4, XFS,
 * tmpfs).  On copy-on-write ones (btrfs, ZFS) or unknown ones, writeback can
 * itself need space and fail silently: the table stays in memory there (0).
 * -1 with errno when dir cannot be looked at.
 */
static int occ_spill_fs(const char *dir) {
    struct statfs st;
    if (statfs(dir, &st) != 0) return -1; /* errno set */
    switch ((unsigned long)st.f_type) {
    case 0xEF53UL:     /* ext2/3/4 */
    case 0x58465342UL: /* XFS */
    case 0x01021994UL: /* tmpfs */
        return 1;
    default:
        return 0;
    }
}

/* An anonymous file in dir (O_TMPFILE: never has a name), else a named one unlinked at once; -1 with errno. */
static int occ_tmpfile(const char *dir) {
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) return fd;
    size_t n = strlen(dir) + 32;
    char *path = malloc(n);
    if (!path) {
        errno = ENOMEM;
        return -1;
    }
    snprintf(path, n, "%s/.rks-occurrences-XXXXXX", dir);
    fd = mkostemp(path, O_CLOEXEC);
    if (fd >= 0) unlink(path);
    free(path);
    return fd;
}

/*
 * A zeroed table of cap slots: heap memory, or past spill_above (on a file
 * system occ_spill_fs accepts) a shared mapping of an anonymous file in
 * spill_dir.  The file's blocks are reserved first (posix_fallocate): a full
 * disk is an error here, never a SIGBUS when a page is first written.  Its
 * pages are file-backed: the kernel writes them back and evicts them under
 * memory pressure, so the table's resident size no longer grows with the
 * partition.  NULL on failure (o->err set for a file error, 0 for out of
 * memory).
 */
static occ_slot_t *occ_alloc(Occurrences *o, size_t cap, int *mapped) {
    size_t bytes = cap * sizeof(occ_slot_t);
    o->err = 0;
    *mapped = 0;
    if (!o->spill_dir || bytes <= o->spill_above) return calloc(cap, sizeof(occ_slot_t));
    int fs = occ_spill_fs(o->spill_dir);
    if (fs < 0) {
        o->err = errno;
        return NULL;
    }
    if (!fs) return calloc(cap, sizeof(occ_slot_t));
    int fd = occ_tmpfile(o->spill_dir);
    if (fd < 0) {
        o->err = errno;
        return NULL;
    }
    int r = posix_fallocate(fd, 0, (off_t)bytes);
    void *p = r ? MAP_FAILED : mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!r && p == MAP_FAILED) r = errno;
    close(fd);
    if (r) {
        o->err = r;
        return NULL;
    }
    madvise(p, bytes, MADV_RANDOM); /* probes are random: no read-ahead */
    *mapped = 1;
    return p;
}

static void occ_free(occ_slot_t *tab, size_t cap, int mapped) {
    if (mapped)
        munmap(tab, cap * sizeof(occ_slot_t));
    else
        free(tab);
}

/* Rehash into a table of newcap slots (GIL not needed); -1 on failure (see occ_alloc). */
static int occ_resize(Occurrences *o, size_t newcap) {
    int mapped;
    occ_slot_t *nt = occ_alloc(o, newcap, &mapped);
    if (!nt) return -1;
    int shift = 64;
    for (size_t c = newcap; c > 1; c >>= 1) shift--;
    occ_slot_t *old = o->tab;
    size_t oldcap = o->cap;
    int oldmapped = o->mapped;
    o->tab = nt;
    o->cap = newcap;
    o->shift = shift;
    o->mapped = mapped;
    for (size_t i = 0; i < oldcap; i++) {
        if (i + OCC_PREFETCH < oldcap) __builtin_prefetch(&nt[occ_home(o, old[i + OCC_PREFETCH].key)], 1);
        if (!old[i].count) continue;
        size_t j = occ_home(o, old[i].key);
        while (nt[j].count) j = (j + 1) & (newcap - 1);
        nt[j] = old[i];
    }
    if (old) occ_free(old, oldcap, oldmapped);
    return 0;
}

enum { OCC_OK, OCC_NOMEM, OCC_OVERFLOW };

/* out[i] = earlier occurrences of fps[i]; the counts advance.  GIL not needed. */
static int occ_number(Occurrences *o, const uint8_t *fps, uint32_t *out, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t key = rd64(fps + 8 * i);
        if (i + OCC_PREFETCH < n && o->cap)
            __builtin_prefetch(&o->tab[occ_home(o, rd64(fps + 8 * (i + OCC_PREFETCH)))], 1);
        if ((o->used + 1) * 10 > o->cap * 7 &&
            occ_resize(o, o->cap ? o->cap * 2 : OCC_MIN_CAP) < 0)
            return OCC_NOMEM;
        size_t mask = o->cap - 1, j = occ_home(o, key);
        occ_slot_t *s;
        for (;;) {
            s = &o->tab[j];
            if (!s->count || s->key == key) break;
            j = (j + 1) & mask;
        }
        if (!s->count) {
            s->key = key;
            o->used++;
        } else if (s->count > UINT32_MAX) {
            return OCC_OVERFLOW; /* this row's number would not fit in uint32 */
        }
        out[i] = (uint32_t)s->count++;
    }
    return OCC_OK;
}

static int Occurrences_init(Occurrences *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"spill_dir", "spill_above", NULL};
    PyObject *dir = Py_None;
    Py_ssize_t above = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|On:Occurrences", kwlist, &dir, &above)) return -1;
    if (self->tab || self->spill_dir) {
        PyErr_SetString(PyExc_RuntimeError, "Occurrences is already initialised");
        return -1;
    }
    if (above < 0) {
        PyErr_SetString(PyExc_ValueError, "spill_above must be >= 0");
        return -1;
    }
    self->spill_above = (size_t)above;
    if (dir != Py_None) {
        PyObject *b = NULL;
        if (!PyUnicode_FSConverter(dir, &b)) return -1;
        const char *path = PyBytes_AsString(b);
        self->spill_dir = path ? strdup(path) : NULL;
        Py_DECREF(b);
        if (!self->spill_dir) {
            if (path) PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

static void Occurrences_dealloc(Occurrences *self) {
    if (self->tab) occ_free(self->tab, self->cap, self->mapped);
    free(self->spill_dir);
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    ((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
    Py_DECREF(tp);
}

static Py_ssize_t Occurrences_len(Occurrences *self) { return (Py_ssize_t)self->used; }

static PyObject *Occurrences_number(Occurrences *self, PyObject *fo) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Occurrences is in use by another call");
        return NULL;
    }
    if (self->broken) {
        PyErr_SetString(PyExc_RuntimeError, "Occurrences is unusable: an earlier number() call "
                                            "failed half-way, so its counts are incomplete");
        return NULL;
    }
    Py_buffer fv, ov;
    if (get_uint_array(fo, &fv, 8, 0, -1, "fps") < 0) return NULL;
    Py_ssize_t n = fv.len / 8;
    PyObject *out = numpy_empty(n, "uint32");
    if (!out || get_uint_array(out, &ov, 4, 1, n, "numpy.empty result") < 0) {
        Py_XDECREF(out);
        PyBuffer_Release(&fv);
        return NULL;
    }
    int r;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    r = occ_number(self, fv.buf, ov.buf, n);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyBuffer_Release(&fv);
    PyBuffer_Release(&ov);
    if (r == OCC_OK) return out;
    Py_DECREF(out);
    self->broken = 1;
    if (r == OCC_NOMEM && self->err) {
        errno = self->err;
        return PyErr_SetFromErrnoWithFilename(PyExc_OSError, self->spill_dir);
    }
    if (r == OCC_NOMEM) return PyErr_NoMemory();
    PyErr_SetString(PyExc_OverflowError, "a fingerprint occurred more than 2**32 times");
    return NULL;
}

static PyObject *Occurrences_nbytes(Occurrences *self, void *closure) {
    return PyLong_FromSize_t(self->cap * sizeof(occ_slot_t));
}

static PyObject *Occurrences_spilled(Occurrences *self, void *closure) {
    return PyBool_FromLong(self->mapped);
}

static PyMethodDef Occurrences_methods[] = {
    {"number", (PyCFunction)Occurrences_number, METH_O,
     "number(fps: uint64 array) -> uint32 array: per row, how many earlier rows (this call and "
     "every earlier call) had the same fingerprint"},
    {NULL}};

static PyGetSetDef Occurrences_getset[] = {
    {"nbytes", (getter)Occurrences_nbytes, NULL, "bytes held by the hash table", NULL},
    {"spilled", (getter)Occurrences_spilled, NULL, "whether the table is a file mapping in spill_dir", NULL},
    {NULL}};

static PyType_Slot Occurrences_slots[] = {
    {Py_tp_doc, (void *)"Occurrences(spill_dir=None, spill_above=0): occurrence numbers of fingerprints "
                        "across calls; len() = distinct fingerprints seen. With spill_dir, a table larger than "
                        "spill_above bytes is a mapping of an unlinked file there (OSError if it cannot be made)"},
    {Py_tp_new, (void *)PyType_GenericNew},
    {Py_tp_init, (void *)Occurrences_init},
    {Py_tp_dealloc, (void *)Occurrences_dealloc},
    {Py_tp_methods, Occurrences_methods},
    {Py_tp_getset, Occurrences_getset},
    {Py_sq_length, (void *)Occurrences_len},
    {0, NULL}};

PyType_Spec Occurrences_spec = {"_rks_native.Occurrences", sizeof(Occurrences), 0,
                                Py_TPFLAGS_DEFAULT, Occurrences_slots};
