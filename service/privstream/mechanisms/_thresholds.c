/* privstream.mechanisms._thresholds: the exact-threshold samplers' lookup, in C.
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
check_format(const Py_buffer *b, const char *name, Py_ssize_t size, int is_signed)
{
    if (!buffer_native_integers(b, size, is_signed)) {
        PyErr_Format(PyExc_ValueError, "count: %s must hold native %s%zd integers, got format "
                     "%.20s of %zd bytes an item", name, is_signed ? "int" : "uint", 8 * size,
                     buffer_format(b), b->itemsize);
        return -1;
    }
    if (!buffer_aligned(b, (uintptr_t)size)) {
        PyErr_Format(PyExc_ValueError, "count: %s must be aligned to its %zd-byte items; pass a "
                     "copy (a new numpy array is aligned)", name, size);
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
    if (check_format(&words, "words", 8, 0) || check_format(&padded, "padded", 8, 0)
        || check_format(&guide, "guide", 2, 0) || check_format(&out, "out", 8, 1)) {
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

static PyMethodDef methods[] = {
    {"count", count, METH_VARARGS,
     "count(words, padded, guide, steps, size, out) -> None: #{l : bounds[l] <= w} for each "
     "word w, into out."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "privstream.mechanisms._thresholds",
    "The exact-threshold samplers' lookup (see _thresholds.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__thresholds(void)
{
    return PyModule_Create(&module);
}
