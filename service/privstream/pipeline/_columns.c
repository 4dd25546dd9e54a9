/* privstream.pipeline._columns: the fast path's loops over a batch's records, in C.
 *
 * fill: one field of a batch of decoded records, straight into an array;
 * assemble: each record's output text from its columns' texts;
 * column, descend: one field of a batch of records as a list; one level down a nested
 * field's path; replace_absent: a column's absent and null values replaced;
 * only, longest, utf8: a batch's type check, its longest message, its UTF-8 check.
 *
 * fill(records, key, kind, out, table) -> bool
 *
 * For each record (an exact dict, as orjson decodes a JSON object, or a
 * decoded struct: see field() below) reads record[key] and writes it to out[i],
 * a writable C-contiguous buffer of len(records) native 8-byte items (float64
 * for FLOAT, int64 otherwise; the format is checked). Returns True if every record has the key and every
 * value is of the kind's exact types; else False, as soon as one is not
 * (what was written is then garbage, and the caller takes its Python path,
 * which decides). The kinds are the fast path's column parsers
 * (privstream.pipeline.columns), value for value:
 *
 *   FLOAT     float or int (not bool) -> float64, float(int) correctly rounded
 *             (real_column: np.fromiter(col, float64));
 *   INT64     int (not bool) within int64 -> int64 (integer_column, public_column);
 *   BOOL      bool -> 0 or 1 (boolean_column);
 *   POSITION  table[value], an int, for a value found in the dict ``table``
 *             (categorical_column: table.get); unhashable or absent -> False.
 *
 * Types are exact (type(v) is float), as the Python path's ``only`` checks:
 * a subclass is never taken here. One loop over the records in place of a
 * list per field, a list of types and numpy's conversion of Python objects.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <structmember.h> /* T_OBJECT_EX */

#include "_buffer_checks.h"

enum { FLOAT = 0, INT64 = 1, BOOL = 2, POSITION = 3 };

/* Whether a buffer's items are native 8-byte floats (FLOAT) or signed integers. */
static int
native_8_bytes(const Py_buffer *b, int kind)
{
    return kind == FLOAT ? buffer_native_float64(b) : buffer_native_integers(b, 8, 1);
}

/* One value: 1 written, 0 not of the kind (no exception set), -1 an exception. */
static int
put(PyObject *value, int kind, PyObject *table, char *at)
{
    PyTypeObject *type = Py_TYPE(value);
    if (kind == FLOAT) {
        double x;
        if (type == &PyFloat_Type) {
            x = PyFloat_AS_DOUBLE(value);
        } else if (type == &PyLong_Type) {
            x = PyLong_AsDouble(value);  /* float(int): correctly rounded */
            if (x == -1.0 && PyErr_Occurred()) {
                return -1;
            }
        } else {
            return 0;
        }
        memcpy(at, &x, 8);
        return 1;
    }
    long long v;
    if (kind == BOOL) {
        if (type != &PyBool_Type) {
            return 0;
        }
        v = value == Py_True;
    } else {
        if (kind == POSITION) {
            value = PyDict_GetItemWithError(table, value);  /* borrowed; as table.get */
            if (value == NULL) {
                return PyErr_Occurred() ? -1 : 0;
            }
            type = Py_TYPE(value);
        }
        if (type != &PyLong_Type) {
            return 0;
        }
        int overflow;
        v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow) {
            return 0;
        }
        if (v == -1 && PyErr_Occurred()) {
            return -1;
        }
    }
    int64_t w = (int64_t)v;
    memcpy(at, &w, 8);
    return 1;
}

/* A record's value under ``key``, a new reference in *value (NULL, no exception set,
 * where the record lacks it); 0, or -1 with an exception.
 *
 * ``key`` is a str, and the record an exact dict (orjson's and the stdlib's objects), or a
 * member descriptor of a struct type, and the record exactly of that type (the field
 * decoder's structs, privstream.pipeline.decode): the value is then the struct's slot,
 * read as Python's attribute access reads it (an unset slot: absent). Anything else is
 * refused (TypeError naming ``who`` and the record's position ``i``).
 *
 * Invariant: the record stays alive while it is read. A dict lookup runs the key's
 * __hash__ and __eq__, which for a Python caller's objects may empty the list of records
 * and free the record: it is held across the lookup, and the value is returned owned. */
static int
field(PyObject *record, PyObject *key, PyObject **value, const char *who, Py_ssize_t i)
{
    *value = NULL;
    if (Py_IS_TYPE(key, &PyMemberDescr_Type)) {
        PyMemberDescrObject *member = (PyMemberDescrObject *)key;
        if (member->d_member->type != T_OBJECT_EX || Py_TYPE(record) != PyDescr_TYPE(member)) {
            PyErr_Format(PyExc_TypeError, "%s: record %zd is not a %.100s, or the member is not "
                         "an object slot", who, i, PyDescr_TYPE(member)->tp_name);
            return -1;
        }
        *value = *(PyObject **)((char *)record + member->d_member->offset);
        Py_XINCREF(*value);
        return 0;
    }
    if (!PyDict_CheckExact(record)) {
        PyErr_Format(PyExc_TypeError, "%s: record %zd is not a dict", who, i);
        return -1;
    }
    Py_INCREF(record);
    *value = PyDict_GetItemWithError(record, key);
    Py_XINCREF(*value);
    Py_DECREF(record);
    return *value == NULL && PyErr_Occurred() ? -1 : 0;
}

/* One record's value into ``at``: 1 written, 0 missing or not of the kind (no exception
 * set), -1 an exception. The value is held while it is written (a POSITION's table lookup
 * hashes it, which may run Python code). */
static int
take(PyObject *record, PyObject *key, int kind, PyObject *table, char *at, Py_ssize_t i)
{
    PyObject *value;
    if (field(record, key, &value, "fill", i) < 0) {
        return -1;
    }
    if (value == NULL) {
        return 0;  /* a missing field: the Python path decides */
    }
    int written = put(value, kind, table, at);
    Py_DECREF(value);
    if (written < 0 && (PyErr_ExceptionMatches(PyExc_TypeError)
                        || PyErr_ExceptionMatches(PyExc_OverflowError))) {
        PyErr_Clear();  /* unhashable (table.get raises it too) or beyond a double */
        written = 0;
    }
    return written;
}

static PyObject *
fill(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *records, *key, *target, *table;
    int kind;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "O!OiOO", &PyList_Type, &records, &key, &kind, &target, &table)) {
        return NULL;
    }
    if (kind < FLOAT || kind > POSITION) {
        return PyErr_Format(PyExc_ValueError, "fill: unknown kind %d", kind);
    }
    if (kind == POSITION && !PyDict_CheckExact(table)) {
        return PyErr_Format(PyExc_TypeError, "fill: POSITION needs a dict table");
    }
    /* the export holds out's memory (no resize while it lives) until the release below */
    if (PyObject_GetBuffer(target, &out, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(records);
    PyObject *result = NULL;
    if (!native_8_bytes(&out, kind) || out.len != 8 * n) {
        PyErr_Format(PyExc_ValueError,
                     "fill: out must be %zd native %s, one per record; got %zd bytes of "
                     "format %.20s", n, kind == FLOAT ? "float64s" : "int64s", out.len,
                     buffer_format(&out));
        goto done;
    }
    char *at = out.buf;
    int good = 1;
    for (Py_ssize_t i = 0; i < n && good; i++, at += 8) {
        /* Invariant: the list holds the n records out was sized for whenever one is read.
         * The lookups in take() may run Python code that changes the list (a hostile
         * __hash__ that empties it): its size is checked again before each read, and a
         * change refuses the call, as a dict changed during iteration does. */
        if (PyList_GET_SIZE(records) != n) {
            PyErr_Format(PyExc_RuntimeError,
                         "fill: the records changed size from %zd to %zd during the call (a "
                         "key's or value's __hash__ or __eq__ changed the list); pass a list "
                         "that nothing changes while it is read", n, PyList_GET_SIZE(records));
            goto done;
        }
        good = take(PyList_GET_ITEM(records, i), key, kind, table, at, i);
        if (good < 0) {
            goto done;
        }
    }
    result = PyBool_FromLong(good);
done:
    PyBuffer_Release(&out);
    return result;
}

/* assemble(parts, count, joined) -> list of count bytes, or with joined one bytes
 *
 * Record i's text is the concatenation, in order, of each part's text for
 * record i: a bytes part is the same for every record; a list part holds one
 * bytes per record; a 1-tuple part holds one bytes of count texts separated
 * by commas (orjson's text of a numeric array without its brackets: numbers
 * hold no comma), record i taking the i-th. The same bytes as joining each
 * record's pieces in Python (privstream.pipeline.encode), without a Python
 * object per piece. With ``joined`` true, one bytes of every record's text
 * followed by a newline (what b"\n".join(records) + b"\n" gives, for file
 * mode), without an object per record either. ValueError (nothing returned)
 * if a list has another length, an item is not bytes, or a tuple holds
 * another number of texts.
 */
static PyObject *
assemble(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *parts;
    Py_ssize_t count;
    int joined = 0;
    if (!PyArg_ParseTuple(args, "O!n|p", &PyList_Type, &parts, &count, &joined)) {
        return NULL;
    }
    if (count < 0) {
        return PyErr_Format(PyExc_ValueError, "assemble: count %zd < 0", count);
    }
    /* Invariant: what the checks and the sizes below read from ``parts`` (borrowed: the
     * list, its parts, a list part's items) is what the copies read. Python code run in
     * between (a finaliser started by a collection) could replace an item by a longer
     * one, and a copy would overrun its record, or free one. The list of records is a
     * tracked object, whose allocation can start a collection: it is allocated first,
     * before anything is read. After it only bytes are allocated, which the collector
     * does not track (their allocation never starts a collection), and PyMem buffers:
     * no Python code runs until the return. */
    PyObject *list = joined ? NULL : PyList_New(count);
    if (!joined && list == NULL) {
        return NULL;
    }
    Py_ssize_t k = PyList_GET_SIZE(parts);
    /* per part: -1 constant, 0 list, 1 split; for splits, the start of each text */
    Py_ssize_t *starts = NULL;
    int *form = PyMem_Calloc((size_t)k + 1, sizeof(int));
    Py_ssize_t *base = PyMem_Calloc((size_t)k + 1, sizeof(Py_ssize_t));
    PyObject *result = NULL;
    if (form == NULL || base == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t splits = 0;
    for (Py_ssize_t j = 0; j < k; j++) {
        PyObject *part = PyList_GET_ITEM(parts, j);
        if (PyBytes_CheckExact(part)) {
            form[j] = -1;
        } else if (PyList_CheckExact(part)) {
            if (PyList_GET_SIZE(part) != count) {
                PyErr_Format(PyExc_ValueError, "assemble: part %zd holds %zd texts, not %zd", j,
                             PyList_GET_SIZE(part), count);
                goto done;
            }
            for (Py_ssize_t i = 0; i < count; i++) {
                if (!PyBytes_CheckExact(PyList_GET_ITEM(part, i))) {
                    PyErr_Format(PyExc_ValueError, "assemble: part %zd item %zd is not bytes", j,
                                 i);
                    goto done;
                }
            }
            form[j] = 0;
        } else if (PyTuple_CheckExact(part) && PyTuple_GET_SIZE(part) == 1
                   && PyBytes_CheckExact(PyTuple_GET_ITEM(part, 0))) {
            form[j] = 1;
            base[j] = splits;
            splits++;
        } else {
            PyErr_Format(PyExc_ValueError, "assemble: part %zd is not bytes, a list or (bytes,)",
                         j);
            goto done;
        }
    }
    /* count + 1 offsets per split and per record's size must not wrap the allocations'
     * sizes below (a count no list of records reaches, but a wrapped size is a heap write) */
    if (count >= PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(Py_ssize_t) / (splits + 1)) {
        PyErr_NoMemory();
        goto done;
    }
    /* the texts of split parts: text i of split s is [starts[s][i], starts[s][i + 1] - 1) */
    starts = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(splits * (count + 1) + 1));
    if (starts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        if (form[j] != 1) {
            continue;
        }
        PyObject *body = PyTuple_GET_ITEM(PyList_GET_ITEM(parts, j), 0);
        const char *text = PyBytes_AS_STRING(body);
        Py_ssize_t length = PyBytes_GET_SIZE(body);
        Py_ssize_t *at = starts + base[j] * (count + 1);
        Py_ssize_t found = 0, position = 0;
        at[0] = 0;
        if (count == 0) {
            if (length != 0) {
                PyErr_Format(PyExc_ValueError, "assemble: part %zd holds texts for no record", j);
                goto done;
            }
            continue;
        }
        while (found < count) {
            const char *comma = memchr(text + position, ',', (size_t)(length - position));
            Py_ssize_t end = comma == NULL ? length : comma - text;
            at[++found] = end + 1;  /* one past the separator */
            if (comma == NULL) {
                break;
            }
            position = end + 1;
        }
        if (found != count || at[count] != length + 1) {
            PyErr_Format(PyExc_ValueError, "assemble: part %zd does not hold %zd texts", j, count);
            goto done;
        }
    }
    /* each record's size, then its bytes: into its own object, or the joined text */
    Py_ssize_t total = 0;
    Py_ssize_t *sizes = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(count + 1));
    if (sizes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        /* what the record and its newline may still take: one part repeated k times may
         * sum past Py_ssize_t, and a wrapped total is a small buffer the copies overrun */
        const Py_ssize_t room = PY_SSIZE_T_MAX - 1 - total;
        Py_ssize_t left = room;
        for (Py_ssize_t j = 0; j < k; j++) {
            PyObject *part = PyList_GET_ITEM(parts, j);
            Py_ssize_t piece;
            if (form[j] < 0) {
                piece = PyBytes_GET_SIZE(part);
            } else if (form[j] == 0) {
                piece = PyBytes_GET_SIZE(PyList_GET_ITEM(part, i));
            } else {
                const Py_ssize_t *at = starts + base[j] * (count + 1);
                piece = at[i + 1] - 1 - at[i];
            }
            if (piece > left) {
                PyMem_Free(sizes);
                PyErr_NoMemory();
                goto done;
            }
            left -= piece;
        }
        sizes[i] = room - left;
        total += room - left + 1;
    }
    result = joined ? PyBytes_FromStringAndSize(NULL, total) : list;
    list = NULL;  /* owned by result from here */
    char *out = NULL;
    if (result != NULL && joined) {
        out = PyBytes_AS_STRING(result);
    }
    for (Py_ssize_t i = 0; i < count && result != NULL; i++) {
        PyObject *record = NULL;
        if (!joined) {
            record = PyBytes_FromStringAndSize(NULL, sizes[i]);
            if (record == NULL) {
                Py_CLEAR(result);
                break;
            }
            out = PyBytes_AS_STRING(record);
        }
        for (Py_ssize_t j = 0; j < k; j++) {
            PyObject *part = PyList_GET_ITEM(parts, j);
            const char *from;
            Py_ssize_t length;
            if (form[j] < 0) {
                from = PyBytes_AS_STRING(part);
                length = PyBytes_GET_SIZE(part);
            } else if (form[j] == 0) {
                PyObject *item = PyList_GET_ITEM(part, i);
                from = PyBytes_AS_STRING(item);
                length = PyBytes_GET_SIZE(item);
            } else {
                const Py_ssize_t *at = starts + base[j] * (count + 1);
                from = PyBytes_AS_STRING(PyTuple_GET_ITEM(part, 0)) + at[i];
                length = at[i + 1] - 1 - at[i];
            }
            memcpy(out, from, (size_t)length);
            out += length;
        }
        if (joined) {
            *out++ = '\n';
        } else {
            PyList_SET_ITEM(result, i, record);
        }
    }
    PyMem_Free(sizes);
done:
    Py_XDECREF(list);  /* a refusal before the copies */
    PyMem_Free(starts);
    PyMem_Free(form);
    PyMem_Free(base);
    return result;
}

/* column(records, key, missing) -> list: record.get(key, missing) of each record (an exact
 * dict, or a decoded struct: field()), the raw column the fast path's parsers see. */
static PyObject *
column(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *records, *key, *missing;
    if (!PyArg_ParseTuple(args, "O!OO", &PyList_Type, &records, &key, &missing)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(records);
    PyObject *values = PyList_New(n);
    if (values == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        /* Invariant: as in fill(), a key's __eq__ may change the list: checked each time */
        if (PyList_GET_SIZE(records) != n) {
            PyErr_Format(PyExc_RuntimeError, "column: the records changed size during the call");
            goto fail;
        }
        PyObject *value;
        if (field(PyList_GET_ITEM(records, i), key, &value, "column", i) < 0) {
            goto fail;
        }
        if (value == NULL) {
            Py_INCREF(missing);
            value = missing;
        }
        PyList_SET_ITEM(values, i, value);
    }
    return values;
fail:
    Py_DECREF(values);
    return NULL;
}

/* replace_absent(values, missing, replacement) -> (replaced, positions)
 *
 * The values (a sequence) with each one that is None or ``missing`` replaced by
 * ``replacement``, and the positions replaced: the column an ``on_missing``
 * field's parser sees (privstream.pipeline.missing), without a Python loop. Only
 * identity is compared: no Python code runs on a value.
 */
static PyObject *
replace_absent(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *values, *missing, *replacement;
    if (!PyArg_ParseTuple(args, "OOO", &values, &missing, &replacement)) {
        return NULL;
    }
    PyObject *fast = PySequence_Fast(values, "replace_absent: values must be a sequence");
    if (fast == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject *replaced = PyList_New(n), *positions = PyList_New(0), *result = NULL;
    if (replaced == NULL || positions == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        /* a list's size may change only through Python code, and none runs here except
         * the position's allocation (a collection's finalisers): read it afresh */
        if (PySequence_Fast_GET_SIZE(fast) != n) {
            PyErr_Format(PyExc_RuntimeError, "replace_absent: the values changed size");
            goto done;
        }
        PyObject *value = PySequence_Fast_GET_ITEM(fast, i);
        if (value == Py_None || value == missing) {
            PyObject *at = PyLong_FromSsize_t(i);
            if (at == NULL || PyList_Append(positions, at) < 0) {
                Py_XDECREF(at);
                goto done;
            }
            Py_DECREF(at);
            value = replacement;
        }
        Py_INCREF(value);
        PyList_SET_ITEM(replaced, i, value);
    }
    result = PyTuple_Pack(2, replaced, positions);
done:
    Py_XDECREF(replaced);
    Py_XDECREF(positions);
    Py_DECREF(fast);
    return result;
}

/* descend(holders, key, empty, missing) -> (children, wrong)
 *
 * One level down a field's path (privstream.pipeline.nesting): for each holder
 * (an exact dict, or a decoded struct: field()), the object under ``key``, an
 * object being of exactly ``empty``'s type (a dict, or the struct type the decoder
 * reads that object into); ``empty`` (an object with no field, which the caller
 * owns) where the key is absent, its value null or ``missing`` (a struct's absent
 * field), so that the next level finds the field missing; ``empty`` too where the
 * value is neither an object nor null, with its position in ``wrong`` (the
 * reference rejects that record). Any other holder is refused (TypeError).
 */
static PyObject *
descend(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *holders, *key, *empty, *missing;
    if (!PyArg_ParseTuple(args, "O!OOO", &PyList_Type, &holders, &key, &empty, &missing)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(holders);
    PyObject *children = PyList_New(n), *wrong = PyList_New(0);
    if (children == NULL || wrong == NULL) {
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        /* Invariant: as in fill(), a key's __eq__ may change the list: checked each time */
        if (PyList_GET_SIZE(holders) != n) {
            PyErr_Format(PyExc_RuntimeError, "descend: the holders changed size during the call");
            goto fail;
        }
        PyObject *child;
        if (field(PyList_GET_ITEM(holders, i), key, &child, "descend", i) < 0) {
            goto fail;
        }
        int absent = child == NULL || child == Py_None || child == missing;
        if (absent || !Py_IS_TYPE(child, Py_TYPE(empty))) {
            if (!absent) {
                PyObject *at = PyLong_FromSsize_t(i);
                int failed = at == NULL || PyList_Append(wrong, at) < 0;
                Py_XDECREF(at);
                if (failed) {
                    Py_DECREF(child);
                    goto fail;
                }
            }
            Py_XDECREF(child);
            Py_INCREF(empty);
            child = empty;
        }
        PyList_SET_ITEM(children, i, child);
    }
    PyObject *result = PyTuple_Pack(2, children, wrong);
    Py_DECREF(children);
    Py_DECREF(wrong);
    return result;
fail:
    Py_XDECREF(children);
    Py_XDECREF(wrong);
    return NULL;
}

/* only(values, kinds) -> bool: whether every value's type is exactly one of the tuple
 * ``kinds`` (no subclass: bool is not int); True for no values. */
static PyObject *
only(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *values, *kinds;
    if (!PyArg_ParseTuple(args, "OO!", &values, &PyTuple_Type, &kinds)) {
        return NULL;
    }
    PyObject *fast = PySequence_Fast(values, "only: values must be a sequence");
    if (fast == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast), k = PyTuple_GET_SIZE(kinds);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    int all = 1;
    for (Py_ssize_t i = 0; i < n && all; i++) {
        PyObject *type = (PyObject *)Py_TYPE(items[i]);
        all = 0;
        for (Py_ssize_t j = 0; j < k; j++) {
            if (type == PyTuple_GET_ITEM(kinds, j)) {
                all = 1;
                break;
            }
        }
    }
    Py_DECREF(fast);
    return PyBool_FromLong(all);
}

/* longest(messages) -> int: the length of the longest message if every one is exactly
 * bytes (0 for none), else -1. */
static PyObject *
longest(PyObject *Py_UNUSED(module), PyObject *messages)
{
    PyObject *fast = PySequence_Fast(messages, "longest: messages must be a sequence");
    if (fast == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast), most = 0;
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyBytes_CheckExact(items[i])) {
            most = -1;
            break;
        }
        if (PyBytes_GET_SIZE(items[i]) > most) {
            most = PyBytes_GET_SIZE(items[i]);
        }
    }
    Py_DECREF(fast);
    return PyLong_FromSsize_t(most);
}

/* Whether n bytes are all ASCII: eight at a time, then the rest. */
static int
ascii_only(const char *s, Py_ssize_t n)
{
    const uint64_t high = 0x8080808080808080u;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t word;
        memcpy(&word, s + i, 8);
        if (word & high) {
            return 0;
        }
    }
    for (; i < n; i++) {
        if ((unsigned char)s[i] & 0x80u) {
            return 0;
        }
    }
    return 1;
}

/* utf8(messages) -> bool: whether every message is exactly bytes and valid UTF-8, by
 * bytes.decode("utf-8")'s own verdict (asked only of a message that is not all ASCII). */
static PyObject *
utf8(PyObject *Py_UNUSED(module), PyObject *messages)
{
    PyObject *fast = PySequence_Fast(messages, "utf8: messages must be a sequence");
    if (fast == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    int valid = 1;
    for (Py_ssize_t i = 0; i < n && valid; i++) {
        if (!PyBytes_CheckExact(items[i])) {
            valid = 0;
            break;
        }
        const char *s = PyBytes_AS_STRING(items[i]);
        Py_ssize_t size = PyBytes_GET_SIZE(items[i]);
        if (ascii_only(s, size)) {
            continue;
        }
        /* Invariant: no Python code runs between two reads of items. The decoder
         * allocates a str (not tracked by the collector: no collection starts) or, for
         * invalid UTF-8, a UnicodeDecodeError (tracked: a collection may start, and its
         * finalisers may change the list); the loop ends then, reading nothing more. */
        PyObject *text = PyUnicode_DecodeUTF8(s, size, "strict");
        if (text == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                Py_DECREF(fast);
                return NULL;
            }
            PyErr_Clear();
            valid = 0;
        }
        Py_XDECREF(text);
    }
    Py_DECREF(fast);
    return PyBool_FromLong(valid);
}

static PyMethodDef methods[] = {
    {"fill", fill, METH_VARARGS,
     "fill(records, key, kind, out, table) -> bool: record[key] of each record into out."},
    {"assemble", assemble, METH_VARARGS,
     "assemble(parts, count, joined=False) -> list of bytes (or one bytes): each record's "
     "text from its parts' texts."},
    {"column", column, METH_VARARGS,
     "column(records, key, missing) -> list: record.get(key, missing) of each record."},
    {"descend", descend, METH_VARARGS,
     "descend(holders, key, empty, missing) -> (children, wrong): each holder's object "
     "under key."},
    {"replace_absent", replace_absent, METH_VARARGS,
     "replace_absent(values, missing, replacement) -> (replaced, positions): None and "
     "missing replaced."},
    {"only", only, METH_VARARGS,
     "only(values, kinds) -> bool: every value's type is exactly one of kinds."},
    {"utf8", utf8, METH_O,
     "utf8(messages) -> bool: every message is bytes and valid UTF-8."},
    {"longest", longest, METH_O,
     "longest(messages) -> int: the longest message's length, -1 unless all are bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "privstream.pipeline._columns",
    "The fast path's loops over a batch's records (see _columns.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__columns(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "FLOAT", FLOAT) || PyModule_AddIntConstant(m, "INT64", INT64)
        || PyModule_AddIntConstant(m, "BOOL", BOOL)
        || PyModule_AddIntConstant(m, "POSITION", POSITION)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
