/* privstream.aggregates._bounds: the batch path's contribution bounds, one C loop a batch.
 *
 * The aggregates' batch path (columnar.py, bounding.py) numbers each unit (a
 * subject's canonical bytes) once for every aggregate of a window, then keeps,
 * per aggregate, a subject's first ``groups`` cells and in each its first
 * ``records`` records, in input order: Accumulator._admit's rule, record by
 * record. A Python dict probe per unit and numpy sorts per batch were most of
 * what three aggregates cost (docs/benchmarks.md, issue 34); these loops make
 * the same decisions without an interpreter step between them.
 *
 * Both tables are C-contiguous int64 arrays of shape (capacity, 2), capacity a
 * power of two, held by the caller (numpy: the memory is traced like any
 * array's): row p holds (key, value), value -1 marking a free row. Open
 * addressing with linear probing, nothing deleted (a window's tables go with
 * it), so a probe stops at the first free row. The home row is the top
 * log2(capacity) bits of key * mix, mix a secret odd 64-bit word drawn per
 * table (multiply-shift, as ledger/_slots.c: a writer who chose the keys
 * cannot pile them into one run of rows). Every call refuses, changing
 * nothing, unless the table stays at most half full even if every key is
 * new; a probe that finds no free row all the same (a corrupt table) stops
 * after ``capacity`` rows and raises. Every array must be 8-byte aligned.
 *
 * intern(table, keys, units, ids, mix) -> size
 *
 *   keys: a list of the units numbered so far (bytes, unit i at index i);
 *   units: a sequence of bytes or None. ids[i] = the number of units[i]: a
 *   unit seen before keeps its number, a new one takes len(keys) and is
 *   appended to keys, None is -1. units must not be keys itself (ValueError:
 *   the appends would move the items the loop reads). A row holds (hash(unit), number): equal
 *   hashes are compared byte for byte, so two units whose hashes collide
 *   keep two numbers. Returns len(keys) after the call.
 *
 * admit(table, used, subjects, cells, verdicts, size, groups, records, mix) -> size
 *
 *   For each record i in order, its subject's number subjects[i] (0 <=
 *   subject < len(used)) and its cell's cells[i] (0 <= cell < 2^32):
 *   verdicts[i] = 1 if the subject's bounds admit it, else 0. A row holds
 *   (subject << 32 | cell, records kept) for each (subject, cell) pair that
 *   kept a record; used[subject] counts the pair's subject's cells (int32).
 *   Each subject and cell is read once: a caller's arrays may alias the table.
 *   A known pair keeps a record while it has fewer than ``records``; a new
 *   one opens while its subject has fewer than ``groups`` cells. ``size``:
 *   the rows held before the call; returns the rows held after it.
 *
 * rehash(old, new, mix) -> size
 *
 *   Every held row of ``old`` into the free table ``new`` (filled with -1,
 *   at least twice as many rows as held), homed by ``mix``.
 *
 * may_disagree(lines) -> list[int]
 *
 *   The indices of the lines (a list of bytes) that hold a run of digits and
 *   points with 19 digits, or an exponent of 3 digits: where file mode's
 *   msgspec decode may read a number otherwise than orjson does, or accept a
 *   line orjson refuses (cli/aggregates_file.py; the argument is
 *   docs/proofs/aggregates.md step 1). One pass, no copy of the lines.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_buffer_checks.h"

#define FREE ((int64_t)-1)
#define CELL_BITS 32

/* 64 - log2(capacity): the home row is the top bits of key * mix. */
static int
home_shift(uint64_t capacity)
{
    int shift = 64;
    for (uint64_t c = capacity; c > 1; c >>= 1) {
        shift--;
    }
    return shift;
}

/* A table's row count, or -1 with ValueError unless it is int64 rows of (key, value),
 * a power of two of them, 8-byte aligned. */
static Py_ssize_t
rows_of(const char *name, Py_buffer *table)
{
    Py_ssize_t capacity = table->len / 16;
    if (!buffer_native_integers(table, 8, 1) || table->len % 16 || capacity < 2
        || (capacity & (capacity - 1)) || !buffer_aligned(table, 8)) {
        PyErr_Format(PyExc_ValueError,
                     "%s: the table must be aligned int64 rows of (key, value), a power of two "
                     "of them (at least 2)", name);
        return -1;
    }
    return capacity;
}

/* ValueError unless ``held`` rows and ``n`` new ones stay within half of ``capacity``. */
static int
check_room(const char *name, long long held, Py_ssize_t n, Py_ssize_t capacity)
{
    if (held < 0 || held > (long long)(capacity / 2) - (long long)n) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %lld rows held and %zd new could exceed half of %zd rows; "
                     "grow the table first", name, held, n, capacity);
        return -1;
    }
    return 0;
}

static int
check_mix(const char *name, unsigned long long mix)
{
    if (!(mix & 1)) {
        PyErr_Format(PyExc_ValueError, "%s: mix %llu is even; give the table's odd multiplier",
                     name, mix);
        return -1;
    }
    return 0;
}

static void
corrupt(const char *name, uint64_t capacity)
{
    PyErr_Format(PyExc_ValueError,
                 "%s: no free row in a table of %llu rows, though at most half should be held: "
                 "the table is corrupt (not filled with -1, or its size understated); rebuild it",
                 name, (unsigned long long)capacity);
}

/* Export ``n`` objects' buffers into ``views`` (C-contiguous, with their formats; those
 * whose bit is set in ``writable`` writable): 0, or -1 with an exception and none held.
 * Called after every argument is converted, so no Python code runs (no __index__) while
 * a buffer is exported and held: the lengths checked are the lengths used. */
static int
export(PyObject **objs, Py_buffer *views, int n, unsigned writable)
{
    for (int i = 0; i < n; i++) {
        int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | ((writable >> i) & 1 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objs[i], &views[i], flags) < 0) {
            while (i-- > 0) {
                PyBuffer_Release(&views[i]);
            }
            return -1;
        }
    }
    return 0;
}

static void
release(Py_buffer *views, int n)
{
    for (int i = 0; i < n; i++) {
        PyBuffer_Release(&views[i]);
    }
}

/* The row holding ``unit`` (hash ``hash``), or the free row it would take; -1 with an
 * exception set for a corrupt table. */
static int64_t
find_unit(int64_t *rows, uint64_t capacity, int shift, uint64_t mix, PyObject *keys,
          PyObject *unit, Py_hash_t hash)
{
    uint64_t p = ((uint64_t)hash * mix) >> shift;
    Py_ssize_t length = PyBytes_GET_SIZE(unit);
    for (uint64_t steps = 0; steps < capacity; steps++, p = (p + 1) & (capacity - 1)) {
        int64_t id = rows[2 * p + 1];
        if (id == FREE) {
            return (int64_t)p;
        }
        if (rows[2 * p] != (int64_t)hash) {
            continue;
        }
        if (id < 0 || id >= PyList_GET_SIZE(keys) || !PyBytes_CheckExact(PyList_GET_ITEM(keys, id))) {
            PyErr_Format(PyExc_ValueError,
                         "intern: row %llu names unit %lld, which keys (%zd units) does not hold "
                         "as bytes: the table and keys are out of step; rebuild both",
                         (unsigned long long)p, (long long)id, PyList_GET_SIZE(keys));
            return -1;
        }
        PyObject *held = PyList_GET_ITEM(keys, id);
        if (PyBytes_GET_SIZE(held) == length
            && memcmp(PyBytes_AS_STRING(held), PyBytes_AS_STRING(unit), (size_t)length) == 0) {
            return (int64_t)p;
        }
    }
    corrupt("intern", capacity);
    return -1;
}

/* Hint the cache about what probing unit ``j`` will read: its home row (``stage`` 2),
 * the keys' slot that row names (1), or the unit that slot holds (0). A hint only: the
 * row may change before the probe, and a wrong guess costs a useless load. */
static void
prefetch(const int64_t *rows, int shift, uint64_t mix, PyObject *keys, Py_hash_t hash,
         int stage)
{
    const int64_t *row = &rows[2 * (((uint64_t)hash * mix) >> shift)];
    if (stage == 2) {
        __builtin_prefetch(row);
        return;
    }
    int64_t id = row[1];
    if (id < 0 || id >= PyList_GET_SIZE(keys)) {
        return;
    }
    PyObject **slot = &((PyListObject *)keys)->ob_item[id];
    if (stage == 1) {
        __builtin_prefetch(slot);
    } else {
        __builtin_prefetch(*slot);
    }
}

/* Each unit's hash (0 for None), checking every unit is bytes or None: 0, or -1 with
 * an exception set. */
static int
hash_units(PyObject **items, Py_ssize_t n, Py_hash_t *hashes)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        hashes[i] = 0;
        if (items[i] == Py_None) {
            continue;
        }
        if (!PyBytes_CheckExact(items[i])) {
            PyErr_Format(PyExc_TypeError,
                         "intern: unit %zd is a %.100s; give bytes (a canonical subject) or None",
                         i, Py_TYPE(items[i])->tp_name);
            return -1;
        }
        hashes[i] = PyObject_Hash(items[i]);  /* bytes: SipHash, cached; no Python code */
        if (hashes[i] == -1) {
            return -1;
        }
    }
    return 0;
}

/* How far ahead (in units) each stage of ``prefetch`` runs: a probe's three dependent
 * loads (row, keys' slot, unit) are in flight for several units at once. */
#define AHEAD 12

/* Number every unit; 0, or -1 with an exception set. */
static int
number_units(int64_t *rows, uint64_t capacity, uint64_t mix, PyObject *keys, PyObject *units,
             int64_t *ids)
{
    int shift = home_shift(capacity);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(units);
    PyObject **items = PySequence_Fast_ITEMS(units);
    Py_hash_t *hashes = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(Py_hash_t));
    if (hashes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int failed = hash_units(items, n, hashes);
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        for (int stage = 2; stage >= 0; stage--) {
            Py_ssize_t j = i + AHEAD * stage / 2 + AHEAD / 4;
            if (j < n && items[j] != Py_None) {
                prefetch(rows, shift, mix, keys, hashes[j], stage);
            }
        }
        if (items[i] == Py_None) {
            ids[i] = -1;
            continue;
        }
        int64_t p = find_unit(rows, capacity, shift, mix, keys, items[i], hashes[i]);
        if (p < 0) {
            failed = 1;
        } else if (rows[2 * p + 1] == FREE) {
            rows[2 * p] = (int64_t)hashes[i];
            rows[2 * p + 1] = (int64_t)PyList_GET_SIZE(keys);
            if (PyList_Append(keys, items[i]) < 0) {
                rows[2 * p + 1] = FREE;
                failed = 1;
            }
        }
        ids[i] = failed ? -1 : rows[2 * p + 1];
    }
    PyMem_Free(hashes);
    return failed ? -1 : 0;
}

static PyObject *
intern(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *objs[2], *keys, *given, *units;
    Py_buffer views[2];
    unsigned long long mix;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "OO!OOK", &objs[0], &PyList_Type, &keys, &given, &objs[1], &mix)) {
        return NULL;
    }
    /* A list or tuple held by PySequence_Fast; the loop runs no Python code (exact bytes
     * only, hashed by bytes_hash), so neither it nor the buffers change under it. */
    units = PySequence_Fast(given, "intern: units must be a sequence of bytes or None");
    if (units == NULL) {
        return NULL;
    }
    if (units == keys) {  /* appending to keys would move the items the loop walks */
        PyErr_SetString(PyExc_ValueError,
                        "intern: units is keys itself; pass a copy of the units (list(keys))");
        Py_DECREF(units);
        return NULL;
    }
    if (export(objs, views, 2, 3) < 0) {
        Py_DECREF(units);
        return NULL;
    }
    Py_buffer *table = &views[0], *ids = &views[1];
    Py_ssize_t n = PySequence_Fast_GET_SIZE(units);
    Py_ssize_t capacity = rows_of("intern", table);
    if (capacity < 0 || check_mix("intern", mix) < 0
        || check_room("intern", PyList_GET_SIZE(keys), n, capacity) < 0) {
        /* the exception is set */
    } else if (!buffer_native_integers(ids, 8, 1) || ids->len != 8 * n || !buffer_aligned(ids, 8)) {
        PyErr_Format(PyExc_ValueError,
                     "intern: ids must be an aligned int64 array of the units' length %zd", n);
    } else if (number_units((int64_t *)table->buf, (uint64_t)capacity, (uint64_t)mix, keys, units,
                            (int64_t *)ids->buf) == 0) {
        result = PyLong_FromSsize_t(PyList_GET_SIZE(keys));
    }
    release(views, 2);
    Py_DECREF(units);
    return result;
}

typedef struct {
    int64_t *rows;
    uint64_t capacity;
    uint64_t mix;
    int32_t *used;
    long long groups;
    long long records;
} Bounds;

/* The row of pair ``key``, or the free row it would take; -1 for a corrupt table. */
static int64_t
find_pair(const Bounds *b, int shift, int64_t key, const char *who)
{
    uint64_t p = ((uint64_t)key * b->mix) >> shift;
    for (uint64_t steps = 0; steps < b->capacity; steps++, p = (p + 1) & (b->capacity - 1)) {
        if (b->rows[2 * p + 1] == FREE || b->rows[2 * p] == key) {
            return (int64_t)p;
        }
    }
    corrupt(who, b->capacity);
    return -1;
}

/* Each record's verdict, in input order; the rows held after, or -1 with an exception. */
static long long
admit_all(Bounds *b, const int64_t *subject, const int64_t *cell, uint8_t *verdict,
          Py_ssize_t n, Py_ssize_t subjects, long long size)
{
    int shift = home_shift(b->capacity);
    for (Py_ssize_t i = 0; i < n; i++) {
        /* each read once: a caller's subjects or cells may alias the table or used, so a
         * second read could see a value this loop wrote and never checked */
        const int64_t who = subject[i], where = cell[i];
        if (who < 0 || who >= subjects || where < 0 || where >= ((int64_t)1 << CELL_BITS)) {
            PyErr_Format(PyExc_ValueError,
                         "admit: record %zd has subject %lld and cell %lld; subjects must be in "
                         "[0, %zd) (used's length) and cells in [0, 2^32)",
                         i, (long long)who, (long long)where, subjects);
            return -1;
        }
        Py_ssize_t j = i + AHEAD;  /* a hint for a later record's row (bounds not needed) */
        if (j < n) {
            uint64_t ahead = ((uint64_t)subject[j] << CELL_BITS) | (uint64_t)cell[j];
            __builtin_prefetch(&b->rows[2 * ((ahead * b->mix) >> shift)]);
        }
        int64_t key = (int64_t)(((uint64_t)who << CELL_BITS) | (uint64_t)where);
        int64_t p = find_pair(b, shift, key, "admit");
        if (p < 0) {
            return -1;
        }
        int64_t *count = &b->rows[2 * p + 1];
        if (*count != FREE) {  /* a cell the subject has: room for one more record? */
            verdict[i] = *count < b->records;
            *count += verdict[i];
        } else {  /* a new cell: room for one more cell? (records >= 1: a record fits) */
            verdict[i] = b->used[who] < b->groups && b->records > 0;
            if (verdict[i]) {
                b->rows[2 * p] = key;
                *count = 1;
                b->used[who]++;
                size++;
            }
        }
    }
    return size;
}

static PyObject *
admit(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *objs[5];
    Py_buffer views[5];
    long long size, groups, records;
    unsigned long long mix;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "OOOOOLLLK", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &size, &groups, &records, &mix)) {
        return NULL;
    }
    /* table, used and verdicts are written */
    if (export(objs, views, 5, 1 | 2 | 16) < 0) {
        return NULL;
    }
    Py_buffer *table = &views[0], *used = &views[1], *subjects = &views[2], *cells = &views[3],
              *verdicts = &views[4];
    Py_ssize_t n = subjects->len / 8;
    Py_ssize_t capacity = rows_of("admit", table);
    if (capacity < 0 || check_mix("admit", mix) < 0 || check_room("admit", size, n, capacity) < 0) {
        /* the exception is set */
    } else if (!buffer_native_integers(subjects, 8, 1) || !buffer_native_integers(cells, 8, 1)
               || !buffer_native_integers(verdicts, 1, 0) || !buffer_native_integers(used, 4, 1)
               || subjects->len % 8 || cells->len != subjects->len || verdicts->len != n
               || !buffer_aligned(subjects, 8) || !buffer_aligned(cells, 8)
               || !buffer_aligned(used, 4)) {
        PyErr_SetString(PyExc_ValueError,
                        "admit: subjects and cells must be aligned int64 arrays of one length, "
                        "verdicts a uint8 array of that length, used an aligned int32 array");
    } else if (groups < 0 || records < 0) {
        PyErr_Format(PyExc_ValueError, "admit: groups %lld and records %lld must be >= 0",
                     groups, records);
    } else {
        Bounds b = {(int64_t *)table->buf, (uint64_t)capacity, (uint64_t)mix,
                    (int32_t *)used->buf, groups, records};
        long long held = admit_all(&b, (const int64_t *)subjects->buf,
                                   (const int64_t *)cells->buf, (uint8_t *)verdicts->buf, n,
                                   used->len / 4, size);
        if (held >= 0) {
            result = PyLong_FromLongLong(held);
        }
    }
    release(views, 5);
    return result;
}

/* Move every held row of ``src`` into the free table ``dst``: 0, or -1 with an exception. */
static int
move_rows(const int64_t *src, Py_ssize_t from, int64_t *dst, Py_ssize_t to, uint64_t mix)
{
    Bounds b = {dst, (uint64_t)to, mix, NULL, 0, 0};
    int shift = home_shift((uint64_t)to);
    for (Py_ssize_t p = 0; p < from; p++) {
        if (src[2 * p + 1] == FREE) {
            continue;
        }
        int64_t q = find_pair(&b, shift, src[2 * p], "rehash");
        if (q < 0) {
            return -1;
        }
        if (dst[2 * q + 1] != FREE) {
            PyErr_SetString(PyExc_ValueError,
                            "rehash: a key held twice in the old table, or a new table not "
                            "filled with -1; rebuild it");
            return -1;
        }
        dst[2 * q] = src[2 * p];
        dst[2 * q + 1] = src[2 * p + 1];
    }
    return 0;
}

static PyObject *
rehash(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *objs[2];
    Py_buffer views[2];
    unsigned long long mix;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "OOK", &objs[0], &objs[1], &mix)) {
        return NULL;
    }
    if (export(objs, views, 2, 2) < 0) {
        return NULL;
    }
    Py_ssize_t from = rows_of("rehash", &views[0]), to = rows_of("rehash", &views[1]);
    if (from >= 0 && to >= 0 && check_mix("rehash", mix) == 0) {
        const int64_t *src = (const int64_t *)views[0].buf;
        long long held = 0;
        for (Py_ssize_t p = 0; p < from; p++) {
            held += src[2 * p + 1] != FREE;
        }
        if (check_room("rehash", held, 0, to) == 0
            && move_rows(src, from, (int64_t *)views[1].buf, to, (uint64_t)mix) == 0) {
            result = PyLong_FromLongLong(held);
        }
    }
    release(views, 2);
    return result;
}

static int
is_digit(unsigned char c)
{
    return (unsigned char)(c - '0') < 10;
}

/* A number's significant digits from which two correctly rounding decoders may read it
 * otherwise (an integer past int64: ``-9223372036854775809``), and its exponent digits
 * from which it may leave the normal doubles (``1e999``, ``1e-400``): docs/proofs/
 * aggregates.md step 1. */
#define MANTISSA_DIGITS 19
#define EXPONENT_DIGITS 3

/* Whether ``line`` holds a run of digits and points with MANTISSA_DIGITS digits, or an
 * exponent ([eE][+-]?) followed by EXPONENT_DIGITS digits. Bytes inside strings count
 * too: a false alarm only costs that line the slower decoder. */
static int
may_disagree_line(const unsigned char *line, Py_ssize_t length)
{
    Py_ssize_t digits = 0;  /* digits in the current run of digits and points */
    Py_ssize_t j = 0;
    while (j < length) {
        if (!is_digit(line[j])) {  /* the common byte: one test, or two */
            digits = line[j] == '.' ? digits : 0;
            j++;
            continue;
        }
        Py_ssize_t start = j;
        while (j < length && is_digit(line[j])) {
            j++;
        }
        digits += j - start;
        if (digits >= MANTISSA_DIGITS) {
            return 1;
        }
        /* an exponent's digits are a whole run, right after [eE][+-]? */
        Py_ssize_t mark = start - 1;
        if (mark >= 0 && (line[mark] == '+' || line[mark] == '-')) {
            mark--;
        }
        if (j - start >= EXPONENT_DIGITS && mark >= 0 && (line[mark] | 0x20) == 'e') {
            return 1;
        }
    }
    return 0;
}

static PyObject *
may_disagree(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *lines;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &lines)) {
        return NULL;
    }
    PyObject *found = PyList_New(0);
    if (found == NULL) {
        return NULL;
    }
    /* PyList_Append runs no Python code, and lines is not found: neither changes lines */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lines); i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (!PyBytes_CheckExact(line)) {
            PyErr_Format(PyExc_TypeError, "may_disagree: line %zd is a %.100s; give bytes", i,
                         Py_TYPE(line)->tp_name);
            Py_DECREF(found);
            return NULL;
        }
        if (!may_disagree_line((const unsigned char *)PyBytes_AS_STRING(line),
                               PyBytes_GET_SIZE(line))) {
            continue;
        }
        PyObject *index = PyLong_FromSsize_t(i);
        if (index == NULL || PyList_Append(found, index) < 0) {
            Py_XDECREF(index);
            Py_DECREF(found);
            return NULL;
        }
        Py_DECREF(index);
    }
    return found;
}

static PyMethodDef methods[] = {
    {"intern", intern, METH_VARARGS,
     "intern(table, keys, units, ids, mix) -> size: each unit's number"},
    {"admit", admit, METH_VARARGS,
     "admit(table, used, subjects, cells, verdicts, size, groups, records, mix) -> size"},
    {"rehash", rehash, METH_VARARGS, "rehash(old, new, mix) -> size: rows into a larger table"},
    {"may_disagree", may_disagree, METH_VARARGS,
     "may_disagree(lines) -> list: the lines whose numbers msgspec and orjson may read "
     "otherwise"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_bounds", "The aggregates' bounds in C (see _bounds.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__bounds(void)
{
    return PyModule_Create(&module);
}
