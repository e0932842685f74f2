/*
 * rks_producer.c - the Producer type: a librdkafka producer owned by this module
 * that produces one chunk of Arrow rows per produce_chunk() call (loop in C, GIL
 * released) and counts delivery reports per "round" in C; Python objects are
 * made only for failed rows, in take_results().  Record ids come either from an
 * Arrow ids column or are formatted per row from a prefix, a fingerprint and an
 * occurrence number (no allocation per record).  Transactions, including
 * send_offsets_to_transaction, return librdkafka's error as a tuple that the
 * wrapper turns into a KafkaException.
 *
 * Threading: one Python thread at a time may call into a Producer (the
 * wrapper holds a lock).  A second concurrent call, or a call made from one
 * of the Producer's own callbacks, raises RuntimeError instead of racing.
 * Delivery reports are served only inside rd_kafka_poll/flush called by the
 * thread in the Producer, so the round table needs no lock.
 *
 * Exceptions raised by error_cb/stats_cb/log_cb are reported with
 * PyErr_WriteUnraisable (sys.unraisablehook) and never interrupt a produce
 * or poll; an exception raised by oauth_cb becomes
 * rd_kafka_oauthbearer_set_token_failure(<exception text>).
 */
#include "rks_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>


typedef struct {
    int64_t row;
    int32_t code;
} fail_t;

typedef struct {
    fail_t *v;
    size_t n, cap;
} fails_t;

static int fails_push(fails_t *f, int64_t row, int32_t code) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        fail_t *q = realloc(f->v, cap * sizeof *q);
        if (!q) return -1;
        f->v = q;
        f->cap = cap;
    }
    f->v[f->n].row = row;
    f->v[f->n].code = code;
    f->n++;
    return 0;
}

/* One round slot.  msg_opaque = gen << 48 | slot << 32 | row. */
#define MAX_SLOTS 65536
typedef struct {
    int64_t round_id;
    uint16_t gen;
    uint8_t used, dirty;
    int64_t acked, reported; /* since the last take_results() */
    int64_t outstanding;     /* produced, not yet reported */
    fails_t fails;
} slot_t;

typedef struct {
    char *name; /* NULL: a free slot */
    size_t len;
    uint64_t hash;
    rd_kafka_topic_t *rkt;
} topic_ent_t;
/* Topic handles kept per producer: an open-addressing table of TOPIC_SLOTS
 * (a power of two), at most TOPIC_KEEP in use. A new name when it is full
 * releases every handle kept and starts again: any number of topics works
 * (a message in flight holds its own reference to its topic). */
#define TOPIC_SLOTS 8192
#define TOPIC_KEEP 4096

typedef struct {
    PyObject_HEAD
    rd_kafka_t *rk;
    int busy;
    PyObject *error_cb, *stats_cb, *log_cb, *oauth_cb;
    slot_t *slots;
    size_t nslots;
    topic_ent_t *topics; /* TOPIC_SLOTS entries once the first topic is met */
    size_t ntopics, last_topic;
    int64_t topic_resets; /* times the table was full and released */
    int64_t dropped_reports; /* reports for forgotten rounds */
    int64_t lost_failures;   /* failed reports whose row could not be recorded (out of memory) */
} Producer;

static const char QF_TEXT[] = "client queue stayed full past the bound; retried from the WAL";

/* --- callbacks served by rd_kafka_poll/flush on the calling thread --- */

static void on_dr(rd_kafka_t *rk, const rks_message_t *m, void *opaque) {
    Producer *self = (Producer *)opaque;
    uint64_t op = (uint64_t)(uintptr_t)m->_private;
    size_t si = (size_t)((op >> 32) & 0xFFFF);
    uint16_t gen = (uint16_t)(op >> 48);
    if (!self || si >= self->nslots) return;
    slot_t *s = &self->slots[si];
    if (!s->used || s->gen != gen) {
        self->dropped_reports++;
        return;
    }
    s->outstanding--;
    s->dirty = 1;
    /* A report is counted only once classified: a failure that cannot be
     * recorded (no memory) leaves the round short of its reports, so the
     * publisher's watchdog sends it again rather than account for it. */
    if (m->err == RKS_ERR_NO_ERROR) {
        s->acked++;
        s->reported++;
    } else if (fails_push(&s->fails, (int64_t)(op & 0xFFFFFFFFu), m->err) < 0) {
        self->lost_failures++;
    } else {
        s->reported++;
    }
}

static void call_py(PyObject *cb, PyObject *args) {
    /* GIL held; steals args */
    if (!args) {
        PyErr_WriteUnraisable(cb);
        return;
    }
    PyObject *r = PyObject_CallObject(cb, args);
    Py_DECREF(args);
    if (!r)
        PyErr_WriteUnraisable(cb);
    else
        Py_DECREF(r);
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    Producer *self = (Producer *)opaque;
    if (!self || !self->error_cb) return;
    char buf[512];
    int fatal = 0;
    if (err == RKS_ERR__FATAL) {
        buf[0] = 0;
        int real = RK(rd_kafka_fatal_error)(rk, buf, sizeof buf);
        if (real) {
            fatal = 1;
            err = real;
            reason = buf;
        }
    }
    const char *name = RK(rd_kafka_err2name)(err);
    PyGILState_STATE g = PyGILState_Ensure();
    call_py(self->error_cb,
            Py_BuildValue("(iNNO)", err, ustr(name, -1), ustr(reason, -1), fatal ? Py_True : Py_False));
    PyGILState_Release(g);
}

static int on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque) {
    Producer *self = (Producer *)opaque;
    if (!self || !self->stats_cb) return 0;
    PyGILState_STATE g = PyGILState_Ensure();
    call_py(self->stats_cb, Py_BuildValue("(N)", ustr(json, (Py_ssize_t)len)));
    PyGILState_Release(g);
    return 0; /* librdkafka frees json */
}

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    Producer *self = (Producer *)RK(rd_kafka_opaque)(rk);
    if (!self || !self->log_cb) return;
    PyGILState_STATE g = PyGILState_Ensure();
    call_py(self->log_cb, Py_BuildValue("(iNN)", level, ustr(fac, -1), ustr(buf, -1)));
    PyGILState_Release(g);
}

static const char *utf8(PyObject *o) {
    return PyUnicode_Check(o) ? PyUnicode_AsUTF8AndSize(o, NULL) : NULL;
}

/* The text of the current exception (GIL held); clears it. */
static void exc_text(char *buf, size_t size) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    PyObject *s = v ? PyObject_Str(v) : NULL;
    const char *u = s ? utf8(s) : NULL;
    if (u && !*u) { /* no message: the exception's repr, e.g. RuntimeError() */
        Py_DECREF(s);
        u = (s = PyObject_Repr(v)) ? utf8(s) : NULL;
    }
    snprintf(buf, size, "%s", u ? u : "oauth_cb failed");
    PyErr_Clear();
    Py_XDECREF(s), Py_XDECREF(t), Py_XDECREF(v), Py_XDECREF(tb);
}

static void on_oauth(rd_kafka_t *rk, const char *config, void *opaque) {
    Producer *self = (Producer *)opaque;
    if (!self || !self->oauth_cb) return;
    char err[512];
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallFunction(self->oauth_cb, "N", ustr(config, -1));
    const char *token, *principal = "";
    double expiry;
    PyObject *ext = Py_None, *k, *v;
    const char **exts = NULL;
    Py_ssize_t next = 0;
#define OFAIL(msg) do { PyErr_Clear(); snprintf(err, sizeof err, "%s", msg); goto failed; } while (0)
    if (!r) {
        exc_text(err, sizeof err);
        goto failed;
    }
    if (!PyTuple_Check(r) || !PyArg_ParseTuple(r, "sd|sO", &token, &expiry, &principal, &ext))
        OFAIL("oauth_cb must return (token, expiry_s[, principal[, extensions]])");
    if (ext != Py_None) {
        Py_ssize_t pos = 0;
        if (!PyDict_Check(ext)) OFAIL("oauth_cb extensions must be a dict of str to str");
        if (!(exts = PyMem_Calloc((size_t)PyDict_Size(ext) * 2 + 1, sizeof *exts))) OFAIL("out of memory");
        while (PyDict_Next(ext, &pos, &k, &v)) { /* the strings live as long as r */
            exts[next] = utf8(k);
            exts[next + 1] = utf8(v);
            if (!exts[next] || !exts[next + 1]) OFAIL("oauth_cb extensions must be a dict of str to str");
            next += 2;
        }
    }
#undef OFAIL
    err[0] = 0;
    int64_t ms = (int64_t)(expiry * 1000.0);
    if (RK(rd_kafka_oauthbearer_set_token)(rk, token, ms, principal, exts, (size_t)next, err,
                                           sizeof err) == RKS_ERR_NO_ERROR)
        goto out;
    if (!err[0]) snprintf(err, sizeof err, "rd_kafka_oauthbearer_set_token failed");
failed:
    RK(rd_kafka_oauthbearer_set_token_failure)(rk, err);
out:
    PyMem_Free(exts);
    Py_XDECREF(r);
    PyGILState_Release(g);
}

/* --- entry/exit guard --- */

static int enter(Producer *self, int need_rk) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Producer is in use by another call (calls must be serialised; "
                        "callbacks must not call back into their Producer)");
        return -1;
    }
    if (need_rk && !self->rk) {
        PyErr_SetString(PyExc_RuntimeError, "Producer is closed");
        return -1;
    }
    self->busy = 1;
    return 0;
}
#define LEAVE(self) ((self)->busy = 0)

static int ms_of(double s) {
    if (s != s || s < 0) return -1; /* NaN or negative: wait forever */
    double ms = ceil(s * 1000.0);
    return ms > (double)INT_MAX ? INT_MAX : (int)ms;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* --- lifecycle --- */

static void destroy_handle(Producer *self) {
    /* GIL held, busy set or object unreachable */
    rd_kafka_t *rk = self->rk;
    topic_ent_t *topics = self->topics;
    self->rk = NULL; /* before the GIL is released: len() from another thread sees it closed */
    self->topics = NULL;
    self->ntopics = self->last_topic = 0;
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; topics && i < TOPIC_SLOTS; i++) {
        if (!topics[i].name) continue;
        RK(rd_kafka_topic_destroy)(topics[i].rkt);
        free(topics[i].name);
    }
    if (rk) RK(rd_kafka_destroy)(rk);
    Py_END_ALLOW_THREADS
    free(topics);
}

static int Producer_traverse(Producer *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE((PyObject *)self));
    Py_VISIT(self->error_cb);
    Py_VISIT(self->stats_cb);
    Py_VISIT(self->log_cb);
    Py_VISIT(self->oauth_cb);
    return 0;
}

static int Producer_clear(Producer *self) {
    Py_CLEAR(self->error_cb);
    Py_CLEAR(self->stats_cb);
    Py_CLEAR(self->log_cb);
    Py_CLEAR(self->oauth_cb);
    return 0;
}

static void Producer_dealloc(Producer *self) {
    PyObject_GC_UnTrack(self);
    if (self->rk) {
        self->busy = 1;
        destroy_handle(self); /* before the callbacks go: destroy may still serve some */
    }
    Producer_clear(self);
    for (size_t i = 0; i < self->nslots; i++) free(self->slots[i].fails.v);
    free(self->slots);
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    ((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
    Py_DECREF(tp);
}

static int set_cb(PyObject **slot, PyObject *cb, const char *name) {
    if (cb == Py_None) return 0;
    if (!PyCallable_Check(cb)) {
        PyErr_Format(PyExc_TypeError, "%s must be callable", name);
        return -1;
    }
    Py_INCREF(cb);
    *slot = cb;
    return 0;
}

static int Producer_init(Producer *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"conf", "error_cb", "stats_cb", "log_cb", "oauth_cb", NULL};
    PyObject *conf, *ecb = Py_None, *scb = Py_None, *lcb = Py_None, *ocb = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|OOOO:Producer", kwlist, &PyDict_Type, &conf,
                                     &ecb, &scb, &lcb, &ocb))
        return -1;
    if (!rk_lib) {
        PyErr_SetString(PyExc_RuntimeError, "_rks_native.load(path) must be called first");
        return -1;
    }
    if (self->rk || self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Producer is already initialised");
        return -1;
    }
    Producer_clear(self);
    if (set_cb(&self->error_cb, ecb, "error_cb") < 0 || set_cb(&self->stats_cb, scb, "stats_cb") < 0 ||
        set_cb(&self->log_cb, lcb, "log_cb") < 0 || set_cb(&self->oauth_cb, ocb, "oauth_cb") < 0)
        return -1;
    char errstr[512];
    rd_kafka_conf_t *c = RK(rd_kafka_conf_new)();
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(conf, &pos, &k, &v)) {
        if (!PyUnicode_Check(k) || !PyUnicode_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "conf keys and values must be str");
            goto fail;
        }
        const char *ks = utf8(k), *vs = utf8(v);
        if (!ks || !vs) goto fail;
        errstr[0] = 0;
        if (RK(rd_kafka_conf_set)(c, ks, vs, errstr, sizeof errstr) != RKS_CONF_OK)
            BAD(fail, "%s", errstr[0] ? errstr : "invalid configuration");
    }
    if (self->log_cb) {
        if (RK(rd_kafka_conf_set)(c, "log.queue", "true", errstr, sizeof errstr) != RKS_CONF_OK)
            BAD(fail, "%s", errstr);
        RK(rd_kafka_conf_set_log_cb)(c, on_log);
    }
    RK(rd_kafka_conf_set_opaque)(c, self);
    RK(rd_kafka_conf_set_dr_msg_cb)(c, on_dr);
    if (self->error_cb) RK(rd_kafka_conf_set_error_cb)(c, on_error);
    if (self->stats_cb) RK(rd_kafka_conf_set_stats_cb)(c, on_stats);
    if (self->oauth_cb) RK(rd_kafka_conf_set_oauthbearer_token_refresh_cb)(c, on_oauth);
    rd_kafka_t *rk;
    self->busy = 1;
    errstr[0] = 0;
    Py_BEGIN_ALLOW_THREADS
    rk = RK(rd_kafka_new)(RKS_PRODUCER, c, errstr, sizeof errstr);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (!rk) BAD(fail, "%s", errstr[0] ? errstr : "rd_kafka_new failed"); /* conf still ours */
    self->rk = rk; /* conf now owned by rk */
    if (self->log_cb) {
        int e = RK(rd_kafka_set_log_queue)(rk, NULL); /* NULL: the main queue, served by poll */
        if (e) {
            PyErr_Format(PyExc_RuntimeError, "rd_kafka_set_log_queue: %s", RK(rd_kafka_err2str)(e));
            self->busy = 1;
            destroy_handle(self);
            self->busy = 0;
            return -1;
        }
    }
    return 0;
fail:
    RK(rd_kafka_conf_destroy)(c);
    return -1;
}

/* --- rounds --- */

static void slot_free(slot_t *s) {
    free(s->fails.v);
    uint16_t gen = (uint16_t)(s->gen + 1);
    memset(s, 0, sizeof *s);
    s->gen = gen;
}

static Py_ssize_t slot_for(Producer *self, int64_t round_id) {
    Py_ssize_t free_i = -1;
    for (size_t i = 0; i < self->nslots; i++) {
        if (self->slots[i].used && self->slots[i].round_id == round_id) return (Py_ssize_t)i;
        if (!self->slots[i].used && free_i < 0) free_i = (Py_ssize_t)i;
    }
    if (free_i < 0) {
        if (self->nslots >= MAX_SLOTS) {
            PyErr_SetString(PyExc_RuntimeError, "too many rounds in flight (65536)");
            return -1;
        }
        size_t n = self->nslots ? self->nslots * 2 : 16;
        if (n > MAX_SLOTS) n = MAX_SLOTS;
        slot_t *q = realloc(self->slots, n * sizeof *q);
        if (!q) {
            PyErr_NoMemory();
            return -1;
        }
        memset(q + self->nslots, 0, (n - self->nslots) * sizeof *q);
        free_i = (Py_ssize_t)self->nslots;
        self->slots = q;
        self->nslots = n;
    }
    slot_t *s = &self->slots[free_i];
    s->used = 1;
    s->round_id = round_id;
    return free_i;
}

static uint64_t topic_hash(const char *name, size_t len) { /* FNV-1a */
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)name[i]) * 1099511628211ULL;
    return h;
}

/* Release every kept handle (the table stays allocated). */
static void topics_release(Producer *self) {
    for (size_t i = 0; i < TOPIC_SLOTS; i++) {
        topic_ent_t *t = &self->topics[i];
        if (!t->name) continue;
        RK(rd_kafka_topic_destroy)(t->rkt);
        free(t->name);
        *t = (topic_ent_t){NULL, 0, 0, NULL};
    }
    self->ntopics = self->last_topic = 0;
    self->topic_resets++;
}

/* Cached topic handle for a name (len bytes, not NUL-terminated); NULL + *err on failure.
 * *err: _INVALID_ARG for a name no topic can have (empty, a NUL in it) or one
 * librdkafka refuses; _CRIT_SYS_RESOURCE when memory ran out (ours: retried). */
static rd_kafka_topic_t *topic_get(Producer *self, const char *name, size_t len, int *err) {
    if (self->ntopics) {
        topic_ent_t *t = &self->topics[self->last_topic];
        if (t->name && t->len == len && memcmp(t->name, name, len) == 0) return t->rkt;
    }
    if (len == 0 || memchr(name, 0, len)) {
        *err = RKS_ERR__INVALID_ARG;
        return NULL;
    }
    if (!self->topics && !(self->topics = calloc(TOPIC_SLOTS, sizeof *self->topics))) {
        *err = RKS_ERR__CRIT_SYS_RESOURCE;
        return NULL;
    }
    uint64_t h = topic_hash(name, len);
    size_t i = (size_t)h & (TOPIC_SLOTS - 1);
    for (size_t probes = 0; probes < TOPIC_SLOTS && self->topics[i].name; probes++) {
        topic_ent_t *t = &self->topics[i];
        if (t->hash == h && t->len == len && memcmp(t->name, name, len) == 0) {
            self->last_topic = i;
            return t->rkt;
        }
        i = (i + 1) & (TOPIC_SLOTS - 1);
    }
    if (self->ntopics >= TOPIC_KEEP) { /* full: release all, then this name takes its home slot */
        topics_release(self);
        i = (size_t)h & (TOPIC_SLOTS - 1);
    }
    char *copy = malloc(len + 1);
    if (!copy) {
        *err = RKS_ERR__CRIT_SYS_RESOURCE;
        return NULL;
    }
    memcpy(copy, name, len);
    copy[len] = 0;
    rd_kafka_topic_t *rkt = RK(rd_kafka_topic_new)(self->rk, copy, NULL);
    if (!rkt) {
        int e = RK(rd_kafka_last_error)();
        *err = e ? e : RKS_ERR__INVALID_ARG;
        free(copy);
        return NULL;
    }
    self->topics[i] = (topic_ent_t){copy, len, h, rkt}; /* i: a free slot (at most half the slots are used) */
    self->last_topic = i;
    self->ntopics++;
    return rkt;
}

/* [(row, code, text)]; text from rd_kafka_err2str now, or the queue-full bound's own text. */
static PyObject *fails_list(const fails_t *f, int sync) {
    PyObject *l = PyList_New((Py_ssize_t)f->n);
    if (!l) return NULL;
    for (size_t i = 0; i < f->n; i++) {
        int code = f->v[i].code;
        const char *text = (sync && code == RKS_ERR__QUEUE_FULL) ? QF_TEXT : RK(rd_kafka_err2str)(code);
        PyObject *t = Py_BuildValue("(LiN)", (long long)f->v[i].row, code, ustr(text, -1));
        if (!t) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SetItem(l, (Py_ssize_t)i, t);
    }
    return l;
}

/* --- record ids: a prefix, then each row's fixed-width fields, big-endian (ids.py: format 1) --- */

#define ID_PREFIX_MAX 64 /* bytes; the fields add at most 3 * 8 + 8 */
#define ID_COLS_MAX 3
#define ID_BUF (ID_PREFIX_MAX + 8 * ID_COLS_MAX + 8)

static inline void put_be(uint8_t *p, uint64_t v, int width) {
    for (int k = width - 1; k >= 0; k--, v >>= 8) p[k] = (uint8_t)(v & 0xff);
}

static PyObject *Producer_produce_chunk(Producer *self, PyObject *args) {
    long long round_id;
    PyObject *topic_o, *vo, *ko, *to, *po, *tso, *ho, *io, *idx_o;
    PyObject *pre_o = Py_None, *cols_o = Py_None;
    long long seq0 = -1;
    const char *idh;
    Py_ssize_t idh_len;
    double block_s;
    if (!PyArg_ParseTuple(args, "LOOOOOOOOy#Od|OOL:produce_chunk", &round_id, &topic_o, &vo, &ko,
                          &to, &po, &tso, &ho, &io, &idh, &idh_len, &idx_o, &block_s, &pre_o,
                          &cols_o, &seq0))
        return NULL;
    if (enter(self, 1) < 0) return NULL;
    col_t val = {0}, key = {0}, top = {0}, part = {0}, ts = {0}, ids = {0}, idx = {0};
    hcol_t hd = {0};
    fails_t sync = {0};
    Py_buffer colv[ID_COLS_MAX] = {{0}};
    const uint8_t *cols[ID_COLS_MAX] = {NULL};
    int widths[ID_COLS_MAX] = {0};
    int ncols = 0;
    uint8_t idbuf[ID_BUF]; /* the prefix once, then each row's fields written after it */
    size_t pre_len = 0, id_len = 0;
    PyObject *ret = NULL;
    const char *dtopic = NULL;
    Py_ssize_t dtopic_len = 0;
    if (topic_o != Py_None) {
        if (!PyUnicode_Check(topic_o)) {
            PyErr_SetString(PyExc_TypeError, "topic must be str or None");
            goto done;
        }
        if (!(dtopic = PyUnicode_AsUTF8AndSize(topic_o, &dtopic_len))) goto done;
    }
    int gen_ids = pre_o != Py_None;
    if (vo == Py_None) BAD(done, "values are required");
    if (gen_ids && io != Py_None) BAD(done, "give ids, or id_prefix with id_cols / id_seq0, not both");
    if (!gen_ids && io == Py_None) BAD(done, "ids (or id_prefix with id_cols / id_seq0) are required");
    if (!gen_ids && (cols_o != Py_None || seq0 >= 0)) BAD(done, "id_cols and id_seq0 go with id_prefix");
    if (gen_ids) {
        char *pp;
        Py_ssize_t pl;
        if (!PyBytes_Check(pre_o)) {
            PyErr_SetString(PyExc_TypeError, "id_prefix must be bytes");
            goto done;
        }
        if (PyBytes_AsStringAndSize(pre_o, &pp, &pl) < 0) goto done;
        if (pl > ID_PREFIX_MAX) BAD(done, "id_prefix is %zd bytes; at most %d", pl, ID_PREFIX_MAX);
        memcpy(idbuf, pp, (size_t)pl);
        pre_len = (size_t)pl;
        if (cols_o != Py_None) {
            if (!PyTuple_Check(cols_o)) {
                PyErr_SetString(PyExc_TypeError, "id_cols must be a tuple of (array, width) pairs");
                goto done;
            }
            if (PyTuple_Size(cols_o) > ID_COLS_MAX) BAD(done, "at most %d id_cols", ID_COLS_MAX);
            for (Py_ssize_t c = 0; c < PyTuple_Size(cols_o); c++) {
                PyObject *pair = PyTuple_GetItem(cols_o, c);
                long w;
                if (!PyTuple_Check(pair) || PyTuple_Size(pair) != 2 ||
                    (w = PyLong_AsLong(PyTuple_GetItem(pair, 1))) == -1 || (w != 4 && w != 8)) {
                    PyErr_Clear();
                    BAD(done, "id_cols[%zd] must be an (array, 4 or 8) pair", c);
                }
                widths[c] = (int)w;
                ncols++;
            }
        }
        id_len = pre_len + (seq0 >= 0 ? 8 : 0);
        for (int c = 0; c < ncols; c++) id_len += (size_t)widths[c];
    }
    if (col_parse(vo, &val, K_BIN, "values") < 0 || col_parse(ko, &key, K_BIN, "keys") < 0 ||
        col_parse(to, &top, K_BIN, "topics") < 0 || col_parse(po, &part, K_INT, "partitions") < 0 ||
        col_parse(tso, &ts, K_INT, "timestamps") < 0 || hcol_parse(ho, &hd) < 0 ||
        col_parse(io, &ids, K_BIN, "ids") < 0)
        goto done;
    Py_ssize_t n = val.len;
    if (check_len(&key, n, "keys") < 0 || check_len(&top, n, "topics") < 0 ||
        check_len(&part, n, "partitions") < 0 || check_len(&ts, n, "timestamps") < 0 ||
        check_len(&hd.list, n, "headers") < 0 || check_len(&ids, n, "ids") < 0)
        goto done;
    for (int c = 0; c < ncols; c++) {
        PyObject *arr = PyTuple_GetItem(PyTuple_GetItem(cols_o, c), 0);
        if (get_uint_array(arr, &colv[c], widths[c], 0, n, "id_cols") < 0) goto done;
        cols[c] = colv[c].buf;
    }
    if (n > (Py_ssize_t)UINT32_MAX) BAD(done, "a chunk holds at most 2**32 rows");
    if (!top.present && !dtopic) BAD(done, "a topic or a topics column is required");
    const int64_t *rows = NULL;
    Py_ssize_t count = n;
    if (idx_o != Py_None) {
        if (getbuf(&idx, idx_o, (const uint8_t **)&rows, &count) < 0) goto done;
        if (count % 8 != 0 || ((uintptr_t)rows & 7) != 0)
            BAD(done, "indices must be an aligned int64 array");
        count /= 8;
        for (Py_ssize_t k = 0; k < count; k++)
            if (rows[k] < 0 || rows[k] >= n)
                BAD(done, "indices[%zd] = %lld is out of range [0, %zd)", k, (long long)rows[k], n);
    }
    Py_ssize_t si = slot_for(self, round_id);
    if (si < 0) goto done;
    rd_kafka_topic_t *drkt = NULL;
    int derr = 0;
    if (dtopic && !(drkt = topic_get(self, dtopic, (size_t)dtopic_len, &derr)))
        BAD(done_slot, "topic %s: %s", dtopic, RK(rd_kafka_err2str)(derr));
    uint64_t opaque_hi = ((uint64_t)self->slots[si].gen << 48) | ((uint64_t)si << 32);
    int64_t produced = 0;
    int oom = 0;
    rd_kafka_t *rk = self->rk;
    Py_BEGIN_ALLOW_THREADS
    double deadline = -1;
    for (Py_ssize_t k = 0; k < count; k++) {
        Py_ssize_t i = rows ? (Py_ssize_t)rows[k] : k;
        if ((k & 1023) == 1023) RK(rd_kafka_poll)(rk, 0);
        rd_kafka_topic_t *rkt = drkt;
        int err = 0;
        if (top.present && !col_null(&top, i)) {
            size_t tl;
            const char *tn = col_bin(&top, i, &tl);
            rkt = topic_get(self, tn, tl, &err);
        } else if (!drkt) {
            err = RKS_ERR__UNKNOWN_TOPIC;
        }
        if (!rkt) {
            if (fails_push(&sync, i, err) < 0) oom = 1;
            continue;
        }
        int32_t p = (part.present && !col_null(&part, i)) ? (int32_t)col_int(&part, i) : RKS_PARTITION_UA;
        int64_t t = (ts.present && !col_null(&ts, i)) ? col_int(&ts, i) : 0;
        size_t vl = 0, kl = 0, il = 0;
        const char *vp = col_null(&val, i) ? NULL : col_bin(&val, i, &vl);
        const char *kp = (key.present && !col_null(&key, i)) ? col_bin(&key, i, &kl) : NULL;
        const char *ip;
        if (gen_ids) {
            size_t at = pre_len;
            for (int c = 0; c < ncols; c++) {
                if (widths[c] == 8) {
                    uint64_t v;
                    memcpy(&v, cols[c] + 8 * i, 8);
                    put_be(idbuf + at, v, 8);
                } else {
                    uint32_t v;
                    memcpy(&v, cols[c] + 4 * i, 4);
                    put_be(idbuf + at, v, 4);
                }
                at += (size_t)widths[c];
            }
            if (seq0 >= 0) put_be(idbuf + at, (uint64_t)seq0 + (uint64_t)i, 8);
            il = id_len;
            ip = (const char *)idbuf; /* rd_kafka_header_add copies the value */
        } else {
            ip = col_null(&ids, i) ? NULL : col_bin(&ids, i, &il);
        }
        int64_t ha = 0, hb = 0;
        if (hd.present && !col_null(&hd.list, i)) hcol_range(&hd, i, &ha, &hb);
        rd_kafka_headers_t *hdrs = RK(rd_kafka_headers_new)((size_t)(1 + hb - ha));
        RK(rd_kafka_header_add)(hdrs, idh, idh_len, ip, ip ? (ssize_t)il : 0);
        for (int64_t j = ha; j < hb; j++) {
            if (col_null(&hd.st, j)) continue;
            size_t hkl = 0, hvl = 0;
            const char *hk = col_null(&hd.key, j) ? EMPTY : col_bin(&hd.key, j, &hkl);
            const char *hv = col_null(&hd.val, j) ? NULL : col_bin(&hd.val, j, &hvl);
            RK(rd_kafka_header_add)(hdrs, hk, (ssize_t)hkl, hv, hv ? (ssize_t)hvl : 0);
        }
        void *op = (void *)(uintptr_t)(opaque_hi | (uint64_t)(uint32_t)i);
        for (int attempt = 0;; attempt++) {
            err = RK(rd_kafka_producev)(rk, RKS_VTYPE_RKT, rkt, RKS_VTYPE_PARTITION, p,
                                        RKS_VTYPE_VALUE, (void *)vp, vl, RKS_VTYPE_KEY,
                                        (const void *)kp, kl, RKS_VTYPE_MSGFLAGS, RKS_MSG_F_COPY,
                                        RKS_VTYPE_TIMESTAMP, t, RKS_VTYPE_HEADERS, hdrs,
                                        RKS_VTYPE_OPAQUE, op, RKS_VTYPE_END);
            if (err != RKS_ERR__QUEUE_FULL) break;
            double now = now_s();
            if (deadline < 0) deadline = now + (block_s > 0 ? block_s : 0);
            if (now >= deadline) {
                if (attempt > 0) break; /* past the bound: one quick retry only */
                RK(rd_kafka_poll)(rk, 0);
                continue;
            }
            int ms = (int)ceil((deadline - now) * 1000.0);
            RK(rd_kafka_poll)(rk, ms < 50 ? ms : 50);
        }
        if (err) {
            RK(rd_kafka_headers_destroy)(hdrs); /* not taken over by a failed producev */
            if (fails_push(&sync, i, err) < 0) oom = 1;
        } else {
            produced++;
            self->slots[si].outstanding++;
        }
    }
    Py_END_ALLOW_THREADS
    PyObject *fl = oom ? PyErr_NoMemory() : fails_list(&sync, 1);
    if (fl) ret = Py_BuildValue("(LN)", (long long)produced, fl);
done_slot:
    if (!self->slots[si].outstanding && !self->slots[si].dirty) slot_free(&self->slots[si]);
done:
    col_release(&val), col_release(&key), col_release(&top), col_release(&part);
    col_release(&ts), col_release(&ids), col_release(&idx);
    hcol_release(&hd);
    for (int c = 0; c < ID_COLS_MAX; c++)
        if (colv[c].obj) PyBuffer_Release(&colv[c]);
    free(sync.v);
    LEAVE(self);
    return ret;
}

static PyObject *Producer_take_results(Producer *self, PyObject *noargs) {
    if (enter(self, 0) < 0) return NULL;
    PyObject *out = PyList_New(0);
    for (size_t i = 0; out && i < self->nslots; i++) { /* build everything first: nothing is lost */
        slot_t *s = &self->slots[i];
        if (!s->used || !s->dirty) continue;
        PyObject *fl = fails_list(&s->fails, 0), *t = NULL;
        if (fl) t = Py_BuildValue("(LLLN)", (long long)s->round_id, (long long)s->acked,
                                  (long long)s->reported, fl);
        if (!t || PyList_Append(out, t) < 0) Py_CLEAR(out);
        Py_XDECREF(t);
    }
    for (size_t i = 0; out && i < self->nslots; i++) { /* then reset the deltas */
        slot_t *s = &self->slots[i];
        if (!s->used || !s->dirty) continue;
        s->acked = s->reported = 0;
        s->fails.n = 0;
        s->dirty = 0;
        if (s->outstanding <= 0) slot_free(s);
    }
    LEAVE(self);
    return out;
}

static PyObject *Producer_forget_round(Producer *self, PyObject *arg) {
    long long rid = PyLong_AsLongLong(arg);
    if (rid == -1 && PyErr_Occurred()) return NULL;
    if (enter(self, 0) < 0) return NULL;
    for (size_t i = 0; i < self->nslots; i++)
        if (self->slots[i].used && self->slots[i].round_id == rid) slot_free(&self->slots[i]);
    LEAVE(self);
    Py_RETURN_NONE;
}

static PyObject *Producer_poll(Producer *self, PyObject *args) {
    double s = 0;
    if (!PyArg_ParseTuple(args, "|d:poll", &s)) return NULL;
    if (enter(self, 1) < 0) return NULL;
    int n, ms = ms_of(s);
    Py_BEGIN_ALLOW_THREADS
    n = RK(rd_kafka_poll)(self->rk, ms);
    Py_END_ALLOW_THREADS
    LEAVE(self);
    return PyLong_FromLong(n);
}

static PyObject *Producer_flush(Producer *self, PyObject *args) {
    double s = -1;
    if (!PyArg_ParseTuple(args, "|d:flush", &s)) return NULL;
    if (enter(self, 1) < 0) return NULL;
    int n, ms = ms_of(s);
    Py_BEGIN_ALLOW_THREADS
    RK(rd_kafka_flush)(self->rk, ms);
    n = RK(rd_kafka_outq_len)(self->rk);
    Py_END_ALLOW_THREADS
    LEAVE(self);
    return PyLong_FromLong(n);
}

static Py_ssize_t Producer_len(Producer *self) {
    return self->rk ? RK(rd_kafka_outq_len)(self->rk) : 0;
}

static PyObject *Producer_purge(Producer *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"in_queue", "in_flight", NULL};
    int q = 1, f = 1, e;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|pp:purge", kwlist, &q, &f)) return NULL;
    if (enter(self, 1) < 0) return NULL;
    Py_BEGIN_ALLOW_THREADS
    e = RK(rd_kafka_purge)(self->rk, (q ? RKS_PURGE_F_QUEUE : 0) | (f ? RKS_PURGE_F_INFLIGHT : 0));
    Py_END_ALLOW_THREADS
    LEAVE(self);
    if (e) return PyErr_Format(PyExc_RuntimeError, "purge: %s", RK(rd_kafka_err2str)(e));
    Py_RETURN_NONE;
}

static PyObject *Producer_close(Producer *self, PyObject *noargs) {
    if (!self->rk) Py_RETURN_NONE;
    if (enter(self, 1) < 0) return NULL;
    destroy_handle(self);
    LEAVE(self);
    Py_RETURN_NONE;
}

/* Transactions: None on success, else (code, name, text, fatal, retriable, txn_requires_abort). */

/* The result tuple of a transactional call; consumes e (NULL: success). */
static PyObject *txn_result(rd_kafka_error_t *e) {
    if (!e) Py_RETURN_NONE;
    PyObject *r = Py_BuildValue("(iNNOOO)", (int)RK(rd_kafka_error_code)(e),
                                ustr(RK(rd_kafka_error_name)(e), -1),
                                ustr(RK(rd_kafka_error_string)(e), -1),
                                RK(rd_kafka_error_is_fatal)(e) ? Py_True : Py_False,
                                RK(rd_kafka_error_is_retriable)(e) ? Py_True : Py_False,
                                RK(rd_kafka_error_txn_requires_abort)(e) ? Py_True : Py_False);
    RK(rd_kafka_error_destroy)(e);
    return r;
}

enum { TX_INIT, TX_BEGIN, TX_COMMIT, TX_ABORT };

static PyObject *txn_call(Producer *self, PyObject *args, int op) {
    double s = -1;
    if (op != TX_BEGIN && !PyArg_ParseTuple(args, "|d", &s)) return NULL;
    if (enter(self, 1) < 0) return NULL;
    int ms = ms_of(s);
    rd_kafka_error_t *e = NULL;
    Py_BEGIN_ALLOW_THREADS
    switch (op) {
    case TX_INIT: e = RK(rd_kafka_init_transactions)(self->rk, ms); break;
    case TX_BEGIN: e = RK(rd_kafka_begin_transaction)(self->rk); break;
    case TX_COMMIT: e = RK(rd_kafka_commit_transaction)(self->rk, ms); break;
    default: e = RK(rd_kafka_abort_transaction)(self->rk, ms); break;
    }
    Py_END_ALLOW_THREADS
    LEAVE(self);
    return txn_result(e);
}

static PyObject *Producer_init_transactions(Producer *self, PyObject *a) { return txn_call(self, a, TX_INIT); }
static PyObject *Producer_begin_transaction(Producer *self, PyObject *a) { return txn_call(self, a, TX_BEGIN); }
static PyObject *Producer_commit_transaction(Producer *self, PyObject *a) { return txn_call(self, a, TX_COMMIT); }
static PyObject *Producer_abort_transaction(Producer *self, PyObject *a) { return txn_call(self, a, TX_ABORT); }

/* The UTF-8 of str o (valid as long as o), refused if it holds a NUL: librdkafka takes C strings. */
static const char *c_name(PyObject *o, const char *what) {
    Py_ssize_t n;
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8AndSize(o, &n) : NULL;
    if (!s) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%s must be str", what);
        return NULL;
    }
    if ((size_t)n != strlen(s)) {
        PyErr_Format(PyExc_ValueError, "%s contains a NUL character", what);
        return NULL;
    }
    return s;
}

/*
 * send_offsets_to_transaction(group_id, [(topic, partition, offset[, metadata])], timeout_s=-1): the
 * offsets (each with its commit metadata, a str, when given) are committed for the consumer group when the
 * transaction commits, and not if it aborts.
 */
static PyObject *Producer_send_offsets_to_transaction(Producer *self, PyObject *args) {
    PyObject *gid_o, *offs_o, *t = NULL;
    double s = -1;
    if (!PyArg_ParseTuple(args, "OO|d:send_offsets_to_transaction", &gid_o, &offs_o, &s))
        return NULL;
    const char *gid = c_name(gid_o, "group_id");
    if (!gid) return NULL;
    if (!rk_lib) return PyErr_Format(PyExc_RuntimeError, "_rks_native.load(path) must be called first");
    Py_ssize_t n = PySequence_Check(offs_o) ? PySequence_Size(offs_o) : -1;
    if (n < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "offsets must be a list of (topic, partition, offset)");
        return NULL;
    }
    if (n > INT_MAX) return PyErr_Format(PyExc_ValueError, "too many offsets");
    rd_kafka_topic_partition_list_t *tps = RK(rd_kafka_topic_partition_list_new)((int)n);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *topic_o;
        int partition;
        long long offset;
        const char *meta = NULL;
        if (!(t = PySequence_GetItem(offs_o, i))) goto fail;
        if (!PyTuple_Check(t) || !PyArg_ParseTuple(t, "OiL|z", &topic_o, &partition, &offset, &meta)) {
            if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "offsets[%zd] must be (topic: str, partition: int, "
                             "offset: int[, metadata: str | None])", i);
            }
            goto fail;
        }
        const char *topic = c_name(topic_o, "topic");
        if (!topic) goto fail;
        rks_topic_partition_t *tp = RK(rd_kafka_topic_partition_list_add)(tps, topic, partition);
        tp->offset = offset;
        if (meta) { /* freed by rd_kafka_topic_partition_list_destroy() (libc free) */
            /* The terminating NUL is committed with the text, as confluent-kafka's own writer does: its reader
             * (TopicPartition.metadata) copies the metadata as a C string, and rd_kafka_committed() hands it the
             * committed bytes without adding a terminator, so a text committed without one reads back followed
             * by whatever the heap held after it. */
            size_t len = strlen(meta) + 1;
            if (!(tp->metadata = malloc(len))) { PyErr_NoMemory(); goto fail; }
            memcpy(tp->metadata, meta, len);
            tp->metadata_size = len;
        }
        Py_CLEAR(t);
    }
    if (enter(self, 1) < 0) goto fail;
    rd_kafka_consumer_group_metadata_t *md = RK(rd_kafka_consumer_group_metadata_new)(gid);
    rd_kafka_error_t *e;
    int ms = ms_of(s);
    Py_BEGIN_ALLOW_THREADS
    e = RK(rd_kafka_send_offsets_to_transaction)(self->rk, tps, md, ms);
    Py_END_ALLOW_THREADS
    LEAVE(self);
    RK(rd_kafka_consumer_group_metadata_destroy)(md);
    RK(rd_kafka_topic_partition_list_destroy)(tps);
    return txn_result(e);
fail:
    Py_XDECREF(t);
    RK(rd_kafka_topic_partition_list_destroy)(tps);
    return NULL;
}

/* Raise a fatal error on purpose (librdkafka's test hook), to exercise the fatal path. */
static PyObject *Producer_test_fatal_error(Producer *self, PyObject *args) {
    int code;
    const char *reason;
    if (!PyArg_ParseTuple(args, "is", &code, &reason) || enter(self, 1) < 0) return NULL;
    int e = RK(rd_kafka_test_fatal_error)(self->rk, code, reason);
    LEAVE(self);
    return PyLong_FromLong(e);
}

static PyObject *Producer_stats(Producer *self, PyObject *noargs) {
    if (enter(self, 0) < 0) return NULL;
    LEAVE(self);
    int64_t outstanding = 0;
    size_t live = 0;
    for (size_t i = 0; i < self->nslots; i++)
        if (self->slots[i].used) live++, outstanding += self->slots[i].outstanding;
    return Py_BuildValue("{s:n,s:L,s:L,s:L,s:n,s:L}", "live_rounds", (Py_ssize_t)live, "outstanding",
                         (long long)outstanding, "dropped_reports", (long long)self->dropped_reports,
                         "lost_failures", (long long)self->lost_failures, "topic_handles",
                         (Py_ssize_t)self->ntopics, "topic_resets", (long long)self->topic_resets);
}

static PyMethodDef Producer_methods[] = {
    {"produce_chunk", (PyCFunction)Producer_produce_chunk, METH_VARARGS,
     "produce_chunk(round_id, topic, values, keys, topics, partitions, timestamps, headers, ids, "
     "id_header, indices, block_s, id_prefix=None, id_cols=None, id_seq0=-1) -> "
     "(produced, [(row, code, text)]); ids None: id = id_prefix + each id_cols (array, width) value "
     "big-endian + (id_seq0 + i) as 8 big-endian bytes when id_seq0 >= 0"},
    {"take_results", (PyCFunction)Producer_take_results, METH_NOARGS,
     "take_results() -> [(round_id, acked, reported, [(row, code, text)])] since the last call"},
    {"forget_round", (PyCFunction)Producer_forget_round, METH_O,
     "forget_round(round_id): later reports of that round are dropped"},
    {"poll", (PyCFunction)Producer_poll, METH_VARARGS, "poll(timeout_s=0) -> events served"},
    {"flush", (PyCFunction)Producer_flush, METH_VARARGS, "flush(timeout_s=-1) -> messages left"},
    {"purge", (PyCFunction)(void (*)(void))Producer_purge, METH_VARARGS | METH_KEYWORDS,
     "purge(in_queue=True, in_flight=True)"},
    {"close", (PyCFunction)Producer_close, METH_NOARGS, "close(): destroy the handle (idempotent)"},
    {"init_transactions", (PyCFunction)Producer_init_transactions, METH_VARARGS, NULL},
    {"begin_transaction", (PyCFunction)Producer_begin_transaction, METH_NOARGS, NULL},
    {"commit_transaction", (PyCFunction)Producer_commit_transaction, METH_VARARGS, NULL},
    {"abort_transaction", (PyCFunction)Producer_abort_transaction, METH_VARARGS, NULL},
    {"send_offsets_to_transaction", (PyCFunction)Producer_send_offsets_to_transaction, METH_VARARGS,
     "send_offsets_to_transaction(group_id, [(topic, partition, offset[, metadata])], timeout_s=-1)"},
    {"_test_fatal_error", (PyCFunction)Producer_test_fatal_error, METH_VARARGS,
     "_test_fatal_error(code, reason): librdkafka's fatal-error test hook"},
    {"native_stats", (PyCFunction)Producer_stats, METH_NOARGS,
     "native_stats() -> dict of round-table counters"},
    {NULL}};

static PyType_Slot Producer_slots[] = {
    {Py_tp_doc, (void *)"Producer(conf, error_cb=None, stats_cb=None, log_cb=None, oauth_cb=None)"},
    {Py_tp_new, (void *)PyType_GenericNew},
    {Py_tp_init, (void *)Producer_init},
    {Py_tp_dealloc, (void *)Producer_dealloc},
    {Py_tp_traverse, (void *)Producer_traverse},
    {Py_tp_clear, (void *)Producer_clear},
    {Py_tp_methods, Producer_methods},
    {Py_sq_length, (void *)Producer_len},
    {0, NULL}};

PyType_Spec Producer_spec = {"_rks_native.Producer", sizeof(Producer), 0,
                                    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, Producer_slots};
