/*
 * rks_crc.c - CRC-32 (zlib's: ISO-HDLC, reflected polynomial 0xEDB88320) of WAL chunks.
 *
 *   crc32(data, crc=0) -> int   the same value as zlib.crc32(data, crc), for any
 *                               data; on x86-64 with PCLMULQDQ, 64-byte blocks are
 *                               folded with carry-less multiplications (Intel,
 *                               "Fast CRC Computation for Generic Polynomials Using
 *                               PCLMULQDQ Instruction", 2009: the bit-reflected
 *                               constants of its appendix), the rest by a table.
 *
 * zlib's own crc32 runs at about 2 GB/s here: at 1 KiB records that is half a
 * microsecond of every record's CPU. Without PCLMULQDQ the table path here is
 * slower than zlib's: wal/format.py then uses zlib's. The WAL format does not change: a chunk
 * written by either is checked by either. The table and the CPU check are set
 * once when the module loads; the loop runs with the GIL released (4 KiB and more).
 */
#include "rks_internal.h"

#include <string.h>

static uint32_t crc_table[256];
static int crc_clmul_ok = 0;

static int crc_use_clmul(void);

void rks_crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
    crc_clmul_ok = crc_use_clmul();
}

/* Bytewise, on the pre-inverted register (no ~ on entry or exit). */
static uint32_t crc_bytes(uint32_t c, const unsigned char *p, size_t n) {
    while (n--) c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define RKS_HAVE_CLMUL 1

/* len >= 64 and a multiple of 16; c is the pre-inverted register; returns the pre-inverted register. */
__attribute__((target("sse4.1,pclmul")))
static uint32_t crc_clmul(uint32_t c, const unsigned char *buf, size_t len) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8;

    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)c));
    buf += 64;
    len -= 64;
    x0 = k1k2;
    while (len >= 64) { /* four lanes folded by 512 bits */
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)(buf + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(buf + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(buf + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(buf + 0x30)));
        buf += 64;
        len -= 64;
    }
    x0 = k3k4; /* the four lanes into one, 128 bits at a time */
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    /* 128 -> 64 bits */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = k5k0;
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    /* Barrett reduction to 32 bits */
    x0 = poly;
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static int crc_use_clmul(void) {
#ifdef RKS_HAVE_CLMUL
    unsigned int a, b, c, d; /* CPUID leaf 1, ECX: bit 1 PCLMULQDQ, bit 19 SSE4.1 (no runtime library needed) */
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c & (1u << 1)) && (c & (1u << 19));
#else
    return 0;
#endif
}

uint32_t rks_crc32(uint32_t crc, const unsigned char *p, size_t n) {
    uint32_t c = ~crc;
#ifdef RKS_HAVE_CLMUL
    if (n >= 64 && crc_clmul_ok) {
        size_t blocks = n & ~(size_t)15;
        c = crc_clmul(c, p, blocks);
        p += blocks;
        n -= blocks;
    }
#endif
    return ~crc_bytes(c, p, n);
}

PyObject *mod_crc32(PyObject *m, PyObject *args) {
    Py_buffer b;
    unsigned int crc = 0;
    if (!PyArg_ParseTuple(args, "y*|I:crc32", &b, &crc)) return NULL;
    uint32_t out;
    if (b.len < 4096) { /* not worth releasing the GIL for (zlib's threshold is alike) */
        out = rks_crc32((uint32_t)crc, (const unsigned char *)b.buf, (size_t)b.len);
    } else {
        Py_BEGIN_ALLOW_THREADS
        out = rks_crc32((uint32_t)crc, (const unsigned char *)b.buf, (size_t)b.len);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(out);
}

PyObject *mod_crc32_hardware(PyObject *m, PyObject *noargs) {
    return PyBool_FromLong(crc_clmul_ok);
}
