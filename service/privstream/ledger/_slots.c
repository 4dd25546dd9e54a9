/* privstream.ledger._slots: the ledger's hash table, one C loop per batch.
 *
 * A table is a C-contiguous int64 array of shape (capacity, 2), capacity a
 * power of two: row p holds (key, slot), or (EMPTY, -) when free. Keys are
 * subject hashes (Python's hash() of the subject bytes, which is never -1,
 * so -1 marks a free row); slots are 0, 1, 2, ... in the order the keys were
 * first seen, and index the rows of the ledger's spending arrays. Open
 * addressing with linear probing: a key lives at the first free row at or
 * after its home row, and nothing is ever deleted (a window's table is
 * dropped whole when the window expires), so a lookup may stop at the first
 * free row.
 *
 * The home row is the top log2(capacity) bits of key * mix (multiply-shift,
 * mix a secret odd 64-bit word drawn per table), not the key's low bits: a
 * raw-topic writer who knows the hash key (PYTHONHASHSEED fixed) can cheaply
 * make thousands of subjects whose hashes share their low 20 bits, which
 * would pile them into one run of rows and make every probe walk it (a
 * quadratic batch, the GIL held: a stalled worker). Multiply-shift with a
 * random odd multiplier puts any two distinct keys in one home row with
 * probability at most 2 / capacity, whatever keys the writer chose.
 *
 * Why C: a Python dict probe per subject was most of what the ledger cost
 * (issue 19); this loop makes the same probes without an interpreter step
 * between them, so the CPU overlaps their cache misses.
 *
 * find(table, keys, slots, firsts, size, insert, mix) -> size
 *
 *   For each keys[i] (int64), in order: slots[i] = its slot. An absent key
 *   gets -1, or with ``insert`` the slot ``size`` (then size += 1), and
 *   firsts[j] = i for the j-th key this call inserts. Returns the new size
 *   (``size`` keys are held before the call). Refuses, changing nothing,
 *   unless the table stays at most half full even if every key is new, so
 *   a probe always ends at a free row; and should a table have no free row
 *   all the same (not filled with -1, or ``size`` understated), a probe
 *   stops after ``capacity`` rows and raises rather than loop forever.
 *   Every array must be 8-byte aligned (an unaligned int64 load is
 *   undefined behaviour in C). ``mix``: the table's odd multiplier, the
 *   same in every call on one table.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_buffer_checks.h"

#define EMPTY ((int64_t)-1)

static int
check(Py_buffer *table, Py_buffer *keys, Py_buffer *slots, Py_buffer *firsts,
      long long size, int insert, unsigned long long mix)
{
    Py_ssize_t capacity = table->len / 16;
    Py_ssize_t n = insert ? keys->len / 8 : 0;  /* how many keys may be new */
    if (table->len % 16 || capacity < 2 || (capacity & (capacity - 1))) {
        PyErr_SetString(PyExc_ValueError,
                        "find: the table must be int64 rows of (key, slot), a power of two of them");
        return -1;
    }
    if (keys->len % 8 || slots->len != keys->len || firsts->len != keys->len) {
        PyErr_SetString(PyExc_ValueError,
                        "find: keys, slots and firsts must be int64 arrays of one length");
        return -1;
    }
    if (!buffer_aligned(table, 8) || !buffer_aligned(keys, 8) || !buffer_aligned(slots, 8)
        || !buffer_aligned(firsts, 8)) {
        PyErr_SetString(PyExc_ValueError, "find: every array must be 8-byte aligned (int64)");
        return -1;
    }
    if (!(mix & 1)) {
        PyErr_Format(PyExc_ValueError, "find: mix %llu is even; give the table's odd multiplier",
                     mix);
        return -1;
    }
    if (size < 0 || size > (long long)(capacity / 2) - (long long)n) {
        PyErr_Format(PyExc_ValueError,
                     "find: %lld keys held and %zd new could exceed half of %zd rows; "
                     "grow the table first", size, n, capacity);
        return -1;
    }
    return 0;
}

/* Each key's slot (see the comment at the top); -1 with an exception set if a probe
 * found no free row (a corrupt table). */
static long long
probe(int64_t *rows, uint64_t capacity, const int64_t *key, int64_t *slot, int64_t *first,
      Py_ssize_t n, long long size, int insert, uint64_t mix)
{
    int shift = 64;
    for (uint64_t c = capacity; c > 1; c >>= 1) {
        shift--;  /* 64 - log2(capacity): the home row is the top bits of key * mix */
    }
    uint64_t mask = capacity - 1;
    long long start = size;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t p = ((uint64_t)key[i] * mix) >> shift;
        uint64_t steps = 0;
        while (rows[2 * p] != key[i] && rows[2 * p] != EMPTY) {
            p = (p + 1) & mask;
            if (++steps == capacity) {
                PyErr_Format(PyExc_ValueError,
                             "find: no free row in a table of %llu rows, though at most half "
                             "should be held: the table is corrupt (not filled with -1, or "
                             "size understated); rebuild it",
                             (unsigned long long)capacity);
                return -1;
            }
        }
        if (rows[2 * p] == EMPTY) {
            if (!insert) {
                slot[i] = -1;
                continue;
            }
            rows[2 * p] = key[i];
            rows[2 * p + 1] = size;
            first[size - start] = (int64_t)i;
            size++;
        }
        slot[i] = rows[2 * p + 1];
    }
    return size;
}

static PyObject *
find(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer table, keys, slots, firsts;
    long long size;
    int insert;
    unsigned long long mix;
    PyObject *result = NULL;
    /* Invariant: the lengths checked are the lengths probed. The arguments' conversions
     * (__index__, __bool__) may run Python code, but only after the four buffers are
     * exported, and an export holds its memory (no resize) until its release below; no
     * Python code runs from the checks to the end of the probes. */
    if (!PyArg_ParseTuple(args, "w*y*w*w*LpK", &table, &keys, &slots, &firsts, &size, &insert,
                          &mix)) {
        return NULL;
    }
    if (check(&table, &keys, &slots, &firsts, size, insert, mix) == 0) {
        const int64_t *key = (const int64_t *)keys.buf;
        Py_ssize_t n = keys.len / 8;
        Py_ssize_t i = 0;
        while (i < n && key[i] != EMPTY) {
            i++;
        }
        if (i < n) {  /* never a hash(): refuse before a row could be lost */
            PyErr_SetString(PyExc_ValueError,
                            "find: a key of -1 (marks a free row; no hash() is -1)");
        } else {
            long long held = probe((int64_t *)table.buf, (uint64_t)(table.len / 16), key,
                                   (int64_t *)slots.buf, (int64_t *)firsts.buf, n, size, insert,
                                   (uint64_t)mix);
            if (held >= 0) {
                result = PyLong_FromLongLong(held);
            }
        }
    }
    PyBuffer_Release(&table);
    PyBuffer_Release(&keys);
    PyBuffer_Release(&slots);
    PyBuffer_Release(&firsts);
    return result;
}

static PyMethodDef methods[] = {
    {"find", find, METH_VARARGS,
     "find(table, keys, slots, firsts, size, insert, mix) -> size: the slots of int64 keys"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_slots", "The ledger's hash table (see _slots.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__slots(void)
{
    return PyModule_Create(&module);
}
