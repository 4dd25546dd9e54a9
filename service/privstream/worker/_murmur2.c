/* privstream.worker._murmur2: Kafka's default partitioner hash over a batch of keys.
 *
 * murmur2(keys, out): out[i] = Java's org.apache.kafka.common.utils.Utils.murmur2(keys[i])
 * as an unsigned 32-bit integer, for a list of bytes; ``out`` is a writable,
 * C-contiguous, 4-byte aligned buffer of len(keys) native uint32s (its format
 * checked: a float32, int32 or uint8 array of the same byte size would take the
 * bits and give wrong partitions). The ledger checks every record's
 * partition with it (worker/ledger_columns.misplaced); numpy needed a dozen
 * passes over the batch per 4-byte word, this is one loop over the key objects.
 * Raises TypeError, changing nothing, unless every key is bytes (a subclass of
 * bytes is its bytes, as for aiokafka's murmur2).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_buffer_checks.h"

static uint32_t
hash(const unsigned char *data, Py_ssize_t length)
{
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;  /* Java: seed ^ length, 32-bit */
    Py_ssize_t whole = length / 4;
    for (Py_ssize_t i = 0; i < whole; i++) {
        const unsigned char *p = data + 4 * i;
        uint32_t k = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16
                     | (uint32_t)p[3] << 24;  /* little-endian word, whatever the host */
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    const unsigned char *tail = data + 4 * whole;
    switch (length % 4) {  /* falls through, as Java's switch does */
    case 3:
        h ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)tail[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

static PyObject *
murmur2(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *keys, *target;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "O!O", &PyList_Type, &keys, &target)) {
        return NULL;
    }
    /* Invariant: the keys are read after the last call that could run Python code (a
     * buffer export can, for a class with __buffer__ from Python 3.12): from here on
     * nothing does, so the borrowed list and keys cannot change while they are hashed. */
    if (PyObject_GetBuffer(target, &out, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(keys);
    PyObject *result = NULL;
    if (!buffer_native_integers(&out, 4, 0) || out.len != 4 * n || !buffer_aligned(&out, 4)) {
        PyErr_Format(PyExc_ValueError,
                     "murmur2: out must be %zd aligned native uint32s, one per key; got %zd "
                     "bytes of format %.20s", n, out.len, buffer_format(&out));
    } else {
        Py_ssize_t i = 0;
        while (i < n && PyBytes_Check(PyList_GET_ITEM(keys, i))) {
            i++;
        }
        if (i < n) {
            PyErr_Format(PyExc_TypeError, "murmur2: key %zd is %.100s, not bytes", i,
                         Py_TYPE(PyList_GET_ITEM(keys, i))->tp_name);
        } else {
            uint32_t *h = (uint32_t *)out.buf;
            for (i = 0; i < n; i++) {  /* no Python code runs here (see above) */
                PyObject *key = PyList_GET_ITEM(keys, i);
                h[i] = hash((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
            }
            result = Py_NewRef(Py_None);
        }
    }
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"murmur2", murmur2, METH_VARARGS,
     "murmur2(keys, out): Kafka's murmur2 of each bytes key into a uint32 buffer"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_murmur2", "Kafka's partitioner hash (see _murmur2.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__murmur2(void)
{
    return PyModule_Create(&module);
}
