/* privstream.worker._records: the records of a Kafka record batch (message format v2),
 * written in one loop over a batch's values.
 *
 * encode(values, tails, start, out, at) -> (count, end): writes values[start],
 * values[start + 1], ... as v2 records into the byte buffer ``out`` from byte ``at``, as
 * many as fit whole, and returns how many it wrote and the byte after the last. Record
 * i (offset delta i - start) is
 *
 *     length:varint attributes:int8=0 timestampDelta:varint=0 offsetDelta:varint
 *     keyLength:varint=-1 valueLength:varint value tails[i]
 *
 * where tails[i] is the record's header count and headers, already encoded (the same
 * object for every record of a batch, as a rule). A varint is the zigzag value in 7-bit
 * groups, low first. ``out`` is a writable, C-contiguous buffer of unsigned bytes (its
 * format checked: any other item type would be a caller's bug). Raises TypeError,
 * writing nothing, unless values and tails are lists of the same length whose items
 * from ``start`` on are bytes; ValueError for a start or at out of range, or for a
 * record over 2**31 - 1 bytes (the records before it written: the caller drops out).
 * Replaces aiokafka's BatchBuilder.append (two Python calls and the headers encoded
 * per record); worker/output_batch.py frames the records as a batch.
 *
 * crc32c(data) -> int: the CRC-32C (Castagnoli) of a C-contiguous buffer of unsigned
 * bytes, the checksum of a record batch, by SSE 4.2's crc32 instruction (8 bytes at a
 * time: 5.8 GB/s here, against 1.4 for aiokafka's calc_crc32c, which was most of what
 * building a batch cost after encode). HARDWARE_CRC says whether this CPU has it (read
 * once, at import); without it crc32c raises RuntimeError and record_batch uses
 * aiokafka's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_buffer_checks.h"

/* zigzag(-1): a null key */
#define NULL_KEY 0x01
/* the bytes of the zigzag varint of a non-negative v (at most 5 for v < 2**31) */
static Py_ssize_t
varint_size(uint64_t v)
{
    uint64_t z = v << 1;
    Py_ssize_t size = 1;
    while (z >= 0x80) {
        z >>= 7;
        size++;
    }
    return size;
}

static unsigned char *
put_varint(unsigned char *p, uint64_t v)
{
    uint64_t z = v << 1;
    while (z >= 0x80) {
        *p++ = (unsigned char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    *p++ = (unsigned char)z;
    return p;
}

/* Whether every item of list[start:] is exactly bytes (a subclass may report another length
   to the caller than the buffer it holds); else TypeError naming the first that is not. */
static int
all_bytes(PyObject *list, Py_ssize_t start, const char *name)
{
    Py_ssize_t n = PyList_GET_SIZE(list);
    for (Py_ssize_t i = start; i < n; i++) {
        if (!PyBytes_CheckExact(PyList_GET_ITEM(list, i))) {
            PyErr_Format(PyExc_TypeError, "encode: %s[%zd] is %.100s, not bytes", name, i,
                         Py_TYPE(PyList_GET_ITEM(list, i))->tp_name);
            return 0;
        }
    }
    return 1;
}

/* Writes what fits of values[start:] from out[at]; -1 (ValueError) for a record too long. */
static Py_ssize_t
write_records(PyObject *values, PyObject *tails, Py_ssize_t start, unsigned char *out,
              Py_ssize_t at, Py_ssize_t size, Py_ssize_t *end)
{
    Py_ssize_t n = PyList_GET_SIZE(values);
    Py_ssize_t i = start;
    for (; i < n; i++) {
        PyObject *value = PyList_GET_ITEM(values, i);
        PyObject *tail = PyList_GET_ITEM(tails, i);
        Py_ssize_t length = PyBytes_GET_SIZE(value), tail_length = PyBytes_GET_SIZE(tail);
        uint64_t delta = (uint64_t)(i - start);
        /* attributes, timestamp delta and key length: one byte each */
        uint64_t body = 3 + (uint64_t)varint_size(delta) + (uint64_t)varint_size(length)
                        + (uint64_t)length + (uint64_t)tail_length;
        if (body > INT32_MAX) {
            PyErr_Format(PyExc_ValueError,
                         "encode: record %zd is %llu bytes, over Kafka's 2147483647", i,
                         (unsigned long long)body);
            return -1;
        }
        Py_ssize_t whole = varint_size(body) + (Py_ssize_t)body;
        if (whole > size - at) {
            break;
        }
        unsigned char *p = put_varint(out + at, body);
        *p++ = 0;  /* attributes */
        *p++ = 0;  /* timestamp delta: the batch's base timestamp */
        p = put_varint(p, delta);
        *p++ = NULL_KEY;
        p = put_varint(p, (uint64_t)length);
        memcpy(p, PyBytes_AS_STRING(value), (size_t)length);
        memcpy(p + length, PyBytes_AS_STRING(tail), (size_t)tail_length);
        at += whole;
    }
    *end = at;
    return i - start;
}

static PyObject *
encode(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *values, *tails, *target;
    Py_ssize_t start, at;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "O!O!nOn", &PyList_Type, &values, &PyList_Type, &tails,
                          &start, &target, &at)) {
        return NULL;
    }
    /* Invariant: the lists are read after the last call that could run Python code (a
     * buffer export can, for a class with __buffer__ from Python 3.12): from here on
     * nothing does, so the borrowed lists and their items cannot change while read. */
    if (PyObject_GetBuffer(target, &out, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(values), count = -1, end = at;
    if (!buffer_native_integers(&out, 1, 0)) {
        PyErr_Format(PyExc_ValueError, "encode: out must hold unsigned bytes; got format %.20s",
                     buffer_format(&out));
    } else if (PyList_GET_SIZE(tails) != n) {
        PyErr_Format(PyExc_TypeError, "encode: %zd tails for %zd values; give one per value",
                     PyList_GET_SIZE(tails), n);
    } else if (start < 0 || start > n || at < 0 || at > out.len) {
        PyErr_Format(PyExc_ValueError,
                     "encode: start %zd of %zd values, at %zd of %zd bytes: out of range", start,
                     n, at, out.len);
    } else if (all_bytes(values, start, "values") && all_bytes(tails, start, "tails")) {
        count = write_records(values, tails, start, out.buf, at, out.len, &end);
    }
    PyBuffer_Release(&out);
    return count < 0 ? NULL : Py_BuildValue("nn", count, end);
}

/* CRC-32C (Castagnoli) with SSE 4.2's crc32 instruction, 8 bytes at a time */
static int hardware_crc;

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2"))) static uint32_t
crc_sse42(uint32_t crc, const unsigned char *p, Py_ssize_t n)
{
    uint64_t c = crc;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t word;
        memcpy(&word, p + i, 8);  /* unaligned: memcpy, not a cast */
        c = __builtin_ia32_crc32di(c, word);
    }
    uint32_t tail = (uint32_t)c;
    for (; i < n; i++) {
        tail = __builtin_ia32_crc32qi(tail, p[i]);
    }
    return tail;
}
#define HAVE_SSE42 1
#endif

static PyObject *
crc32c(PyObject *Py_UNUSED(module), PyObject *source)
{
    Py_buffer data;
    if (!hardware_crc) {
        PyErr_SetString(PyExc_RuntimeError,
                        "crc32c: this CPU has no SSE 4.2 (HARDWARE_CRC is False); "
                        "use aiokafka's calc_crc32c");
        return NULL;
    }
    if (PyObject_GetBuffer(source, &data, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS)) {
        return NULL;
    }
    PyObject *result = NULL;
    if (!buffer_native_integers(&data, 1, 0)) {
        PyErr_Format(PyExc_ValueError, "crc32c: data must hold unsigned bytes; got format %.20s",
                     buffer_format(&data));
    } else {
#ifdef HAVE_SSE42
        uint32_t crc = crc_sse42(0xFFFFFFFFu, data.buf, data.len);
        result = PyLong_FromUnsignedLong(crc ^ 0xFFFFFFFFu);
#endif
    }
    PyBuffer_Release(&data);
    return result;
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_VARARGS,
     "encode(values, tails, start, out, at): v2 records of values[start:] into out"},
    {"crc32c", crc32c, METH_O, "crc32c(data): CRC-32C of a byte buffer (SSE 4.2 only)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_records", "Kafka v2 records of a batch (see _records.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__records(void)
{
#ifdef HAVE_SSE42
    __builtin_cpu_init();
    hardware_crc = __builtin_cpu_supports("sse4.2");
#endif
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddObjectRef(m, "HARDWARE_CRC", hardware_crc ? Py_True : Py_False)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
