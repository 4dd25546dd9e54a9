/* privstream.mechanisms._thresholds: the mechanisms layer's two hot loops, in C: the
 * exact-threshold samplers' lookup (count) and local hashing's support count (support).
 *
 * count(words, padded, guide, steps, size, out) -> None
 *
 * For each 64-bit word w of ``words`` writes to out[i] the number of a sorted
 * table's thresholds at or below it, #{l : bounds[l] <= w}, as the discrete
 * Laplace sampler's levels define it (privstream.mechanisms.thresholds):
 *
 *     index = guide[w >> 48];                       the count below w's bucket
 *     steps times: index += padded[index] <= w;     the few inside it
 *     out[i] = min(index, size);
 *
 * ``padded`` is the ``size`` thresholds followed by ``steps`` sentinels
 * 2^64 - 1 (only the word 2^64 - 1 passes one: hence the minimum), ``guide``
 * the 65,536 counts per bucket of the top 16 bits, as uint16 (128 KiB, half
 * the cache misses of int32 when a batch's other work has evicted it; a
 * level holds at most 65,535 thresholds). One loop over the words in place
 * of numpy's passes (a shift, two gathers per step, a compare, an add, a
 * minimum and a copy, each over the whole column).
 *
 * Buffers: words uint64, padded uint64, guide uint16, out int64 (writable),
 * each native, aligned and C-contiguous (any shape: read as flat), guide of
 * 65,536 items, padded of size + steps, out of as many items as words; all
 * checked before anything is written (ValueError; numpy's own ValueError for a
 * strided or read-only array it will not export so). No read leaves a
 * buffer, whatever the tables hold: each guide entry is checked to be at
 * most size before it is used, so the s-th read (s < steps) is of
 * padded[index] with index <= entry + s < size + steps, inside padded; a
 * corrupt entry raises ValueError (what was written to out by then is
 * garbage). The thresholds' order is the caller's contract
 * (tests/unit/mechanisms/test_thresholds.py checks the counts against a
 * search).
 *
 * The GIL is held: a call is one batch's column, tens of microseconds.
 *
 * support(seeds, buckets, digests, g, out) -> None
 *
 * For each candidate digest d writes to out[j] the number of OLH reports
 * (seed s_i, bucket y_i) that support it, #{i : splitmix64(d XOR s_i) mod g == y_i}
 * (privstream.mechanisms.local_hashing.support_counts; the hash is the release
 * format, hash_to_bucket). The remainder is never computed: with h the hash and
 * y < g, h mod g == y iff h >= y and g divides h - y, and for g = 2^t g' (g' odd)
 * g divides x iff rotr(x * inverse(g') mod 2^64, t) <= floor((2^64 - 1) / g): one
 * multiply in place of a 64-bit division (proof: docs/proofs/local-hashing.md,
 * step 4). One pass, no temporaries: per block of 2,048 records (their seeds and
 * buckets, 32 KiB, stay in the core's first-level cache) every candidate runs
 * over the block; the loop over the block is vectorised (omp simd, -fopenmp-simd:
 * also at the -O1 of make csan) in three clones chosen at load time (x86-64-v4's
 * 64-bit vector multiply, AVX2, and the baseline: never -march=native, the wheel
 * must run on any x86-64; one baseline loop where clones cannot be built, see
 * SUPPORT_CLONES).
 *
 * Buffers: seeds, buckets and digests uint64, out int64 (writable), native,
 * aligned, C-contiguous (read as flat); buckets as many as seeds, out one per
 * digest; g an int in [1, 2^64 - 1]; every bucket below g (the test above needs
 * it). All checked before anything is written (ValueError, OverflowError or
 * TypeError for g). The GIL is released for the loop, so the caller's threads
 * can count disjoint blocks of records at once (local_hashing.support_counts runs
 * two); the exports keep the buffers' memory alive meanwhile.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_buffer_checks.h"

#define GUIDE_BITS 16
#define GUIDE_SIZE ((Py_ssize_t)1 << GUIDE_BITS)

/* ValueError unless ``b`` holds aligned native integers of ``size`` bytes; 0 if it does
 * (an unaligned load is undefined behaviour in C). */
static int
check_format(const char *function, const Py_buffer *b, const char *name, Py_ssize_t size,
             int is_signed)
{
    if (!buffer_native_integers(b, size, is_signed)) {
        PyErr_Format(PyExc_ValueError, "%s: %s must hold native %s%zd integers, got format "
                     "%.20s of %zd bytes an item", function, name, is_signed ? "int" : "uint",
                     8 * size, buffer_format(b), b->itemsize);
        return -1;
    }
    if (!buffer_aligned(b, (uintptr_t)size)) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be aligned to its %zd-byte items; pass a "
                     "copy (a new numpy array is aligned)", function, name, size);
        return -1;
    }
    return 0;
}

static PyObject *
count(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *words_arg, *padded_arg, *guide_arg, *out_arg;
    Py_ssize_t steps, size;
    if (!PyArg_ParseTuple(args, "OOOnnO", &words_arg, &padded_arg, &guide_arg, &steps, &size,
                          &out_arg)) {
        return NULL;
    }
    /* Invariant: every length and item is read after the last call that can run Python
     * code (the conversions' __index__ above; an export, for a class with __buffer__ from
     * Python 3.12): the exports hold their memory until the releases at the end, and no
     * Python code runs in the loop. */
    Py_buffer words = {0}, padded = {0}, guide = {0}, out = {0};
    const int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(words_arg, &words, flags)
        || PyObject_GetBuffer(padded_arg, &padded, flags)
        || PyObject_GetBuffer(guide_arg, &guide, flags)
        || PyObject_GetBuffer(out_arg, &out, flags | PyBUF_WRITABLE)) {
        goto done;
    }
    if (check_format("count", &words, "words", 8, 0)
        || check_format("count", &padded, "padded", 8, 0)
        || check_format("count", &guide, "guide", 2, 0)
        || check_format("count", &out, "out", 8, 1)) {
        goto done;
    }
    const Py_ssize_t n = words.len / 8, entries = padded.len / 8;
    if (guide.len / 2 != GUIDE_SIZE) {
        PyErr_Format(PyExc_ValueError, "count: guide holds %zd entries, not %zd", guide.len / 2,
                     GUIDE_SIZE);
        goto done;
    }
    /* written so that no sum can overflow: 0 <= size <= entries, steps = entries - size */
    if (size < 0 || steps < 0 || size > entries || steps != entries - size) {
        PyErr_Format(PyExc_ValueError, "count: padded holds %zd entries, not size %zd + steps %zd "
                     "(both at least 0)", entries, size, steps);
        goto done;
    }
    if (out.len / 8 != n) {
        PyErr_Format(PyExc_ValueError, "count: out holds %zd items, not one per word (%zd)",
                     out.len / 8, n);
        goto done;
    }
    const uint64_t *w = words.buf, *table = padded.buf;
    const uint16_t *buckets = guide.buf;
    int64_t *into = out.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint64_t word = w[i];
        const Py_ssize_t first = buckets[word >> (64 - GUIDE_BITS)];
        if (first > size) {
            PyErr_Format(PyExc_ValueError, "count: guide[%zd] = %zd is outside [0, %zd]: a corrupt "
                         "table", (Py_ssize_t)(word >> (64 - GUIDE_BITS)), first, size);
            goto done;
        }
        Py_ssize_t index = first;
        for (Py_ssize_t s = 0; s < steps; s++) {
            index += table[index] <= word;
        }
        into[i] = index < size ? index : size;
    }
    result = Py_NewRef(Py_None);
done:
    /* a view never filled (its GetBuffer failed or was not reached) has obj NULL: a no-op */
    PyBuffer_Release(&words);
    PyBuffer_Release(&padded);
    PyBuffer_Release(&guide);
    PyBuffer_Release(&out);
    return result;
}

/* Records per block of the support count: their seeds and buckets (32 KiB) stay in the
 * first-level cache while every candidate runs over them. */
#define SUPPORT_BLOCK 2048

/* The divisibility test by g = 2^shift * odd (support's comment above): the proof page's
 * u, t and L. */
typedef struct {
    uint64_t inverse; /* odd^-1 mod 2^64 */
    unsigned shift;   /* the power of two in g */
    uint64_t limit;   /* floor((2^64 - 1) / g) */
} divisor;

static divisor
divisor_of(uint64_t g)
{
    divisor d;
    d.shift = (unsigned)__builtin_ctzll(g);
    const uint64_t odd = g >> d.shift;
    /* Newton's iteration x <- x (2 - odd x) doubles the correct low bits; odd * odd = 1
     * mod 8 makes x = odd right in 3, so 3 -> 6 -> 12 -> 24 -> 48 -> 96 in five steps. */
    uint64_t x = odd;
    for (int i = 0; i < 5; i++) {
        x *= 2 - odd * x;
    }
    d.inverse = x;
    d.limit = UINT64_MAX / g;
    return d;
}

/* #{i < len : splitmix64(digest ^ seeds[i]) mod g == buckets[i]}, for buckets below g. */
static inline int64_t
block_support(const uint64_t *restrict seeds, const uint64_t *restrict buckets, Py_ssize_t len,
              uint64_t digest, divisor d)
{
    int64_t hits = 0;
    const unsigned back = (64 - d.shift) & 63; /* a rotation by 0 must not shift by 64 */
#pragma omp simd reduction(+ : hits)
    for (Py_ssize_t i = 0; i < len; i++) {
        uint64_t z = (digest ^ seeds[i]) + 0x9E3779B97F4A7C15u; /* splitmix64 */
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
        z ^= z >> 31;
        const uint64_t y = buckets[i];
        const uint64_t q = (z - y) * d.inverse;
        hits += (z >= y) & (((q >> d.shift) | (q << back)) <= d.limit);
    }
    return hits;
}

/* Clones need x86-64, GCC 11+ (arch=x86-64-v4) and glibc (the loader's ifunc picks the
 * clone); elsewhere (ARM, musl, clang) one loop, vectorised for the baseline ISA. */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && !defined(__clang__) \
    && __GNUC__ >= 11
#define SUPPORT_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define SUPPORT_CLONES
#endif

/* out[j] = the support of digests[j] among the n reports; runs without the GIL. */
SUPPORT_CLONES static void
support_loop(const uint64_t *seeds, const uint64_t *buckets, Py_ssize_t n,
             const uint64_t *digests, Py_ssize_t k, divisor d, int64_t *out)
{
    for (Py_ssize_t j = 0; j < k; j++) {
        out[j] = 0;
    }
    for (Py_ssize_t first = 0; first < n; first += SUPPORT_BLOCK) {
        const Py_ssize_t len = n - first < SUPPORT_BLOCK ? n - first : SUPPORT_BLOCK;
        for (Py_ssize_t j = 0; j < k; j++) {
            out[j] += block_support(seeds + first, buckets + first, len, digests[j], d);
        }
    }
}

static PyObject *
support(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *seeds_arg, *buckets_arg, *digests_arg, *g_arg, *out_arg;
    if (!PyArg_ParseTuple(args, "OOOO!O", &seeds_arg, &buckets_arg, &digests_arg, &PyLong_Type,
                          &g_arg, &out_arg)) {
        return NULL;
    }
    /* an exact int (no __index__ runs): OverflowError outside [0, 2^64 - 1] */
    const uint64_t g = PyLong_AsUnsignedLongLong(g_arg);
    if (g == (uint64_t)-1 && PyErr_Occurred()) {
        return NULL;
    }
    if (g == 0) {
        PyErr_SetString(PyExc_ValueError, "support: g = 0 buckets; g must be at least 1");
        return NULL;
    }
    /* Invariant as in count: every length and item is read after the exports, which hold
     * the memory until the releases at the end. */
    Py_buffer seeds = {0}, buckets = {0}, digests = {0}, out = {0};
    const int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(seeds_arg, &seeds, flags)
        || PyObject_GetBuffer(buckets_arg, &buckets, flags)
        || PyObject_GetBuffer(digests_arg, &digests, flags)
        || PyObject_GetBuffer(out_arg, &out, flags | PyBUF_WRITABLE)) {
        goto done;
    }
    if (check_format("support", &seeds, "seeds", 8, 0)
        || check_format("support", &buckets, "buckets", 8, 0)
        || check_format("support", &digests, "digests", 8, 0)
        || check_format("support", &out, "out", 8, 1)) {
        goto done;
    }
    const Py_ssize_t n = seeds.len / 8, k = digests.len / 8;
    if (buckets.len / 8 != n || out.len / 8 != k) {
        PyErr_Format(PyExc_ValueError, "support: %zd seeds need as many buckets (got %zd) and "
                     "%zd digests as many out items (got %zd)", n, buckets.len / 8, k,
                     out.len / 8);
        goto done;
    }
    const uint64_t *y = buckets.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (y[i] >= g) {
            PyErr_Format(PyExc_ValueError, "support: buckets[%zd] = %llu is not below g = %llu",
                         i, (unsigned long long)y[i], (unsigned long long)g);
            goto done;
        }
    }
    const divisor d = divisor_of(g);
    Py_BEGIN_ALLOW_THREADS
    support_loop(seeds.buf, y, n, digests.buf, k, d, out.buf);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&seeds);
    PyBuffer_Release(&buckets);
    PyBuffer_Release(&digests);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"count", count, METH_VARARGS,
     "count(words, padded, guide, steps, size, out) -> None: #{l : bounds[l] <= w} for each "
     "word w, into out."},
    {"support", support, METH_VARARGS,
     "support(seeds, buckets, digests, g, out) -> None: #{i : splitmix64(d ^ seeds[i]) mod g "
     "== buckets[i]} for each digest d, into out (the GIL released)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "privstream.mechanisms._thresholds",
    "The exact-threshold samplers' lookup and local hashing's support count (see "
    "_thresholds.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__thresholds(void)
{
    return PyModule_Create(&module);
}
