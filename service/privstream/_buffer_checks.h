/* privstream/_buffer_checks.h: the buffer checks the six C extensions share.
 *
 * Each extension reads or writes a caller's buffer (a numpy array, as a rule)
 * as raw native items: _columns.fill writes float64 or int64, _murmur2 writes
 * uint32, _records writes unsigned bytes, _thresholds reads uint64 and uint16 and
 * writes int64, _slots reads and writes int64, _bounds reads and writes int64 and int32 and
 * writes uint8. A buffer of another item type or size of the same byte
 * length would take the bits and give wrong results, and an unaligned one
 * makes every load undefined behaviour in C; so each extension checks the
 * format, the item size and the alignment before it reads or writes an item,
 * with these functions (one definition, not a copy per extension).
 *
 * A format is the struct module's: one item code, optionally after '@' or '='
 * (native byte order; numpy exports int64 as 'l' on LP64, 'q' elsewhere); a
 * buffer exported without a format is bytes ('B').
 *
 * Included by service/privstream/{pipeline/_columns,worker/_murmur2,worker/_records,
 * mechanisms/_thresholds,ledger/_slots,aggregates/_bounds}.c, found through the extensions'
 * include-dirs (pyproject.toml) and shipped in the sdist (MANIFEST.in).
 */
#ifndef PRIVSTREAM_BUFFER_CHECKS_H
#define PRIVSTREAM_BUFFER_CHECKS_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

/* The buffer's format for a message: 'B' when it was exported without one. */
static inline const char *
buffer_format(const Py_buffer *b)
{
    return b->format == NULL ? "B" : b->format;
}

/* The item code of a one-item native format, or '\0' for any other format. */
static inline char
buffer_code(const Py_buffer *b)
{
    const char *f = buffer_format(b);
    if (*f == '@' || *f == '=') {
        f++;
    }
    return f[0] != '\0' && f[1] == '\0' ? f[0] : '\0';
}

/* The native size in bytes of an integer item code of the given signedness (lower
 * case signed, upper case unsigned), 0 for any other code. */
static inline Py_ssize_t
buffer_integer_size(char code, int is_signed)
{
    static const Py_ssize_t sizes[] = {
        sizeof(char), sizeof(short), sizeof(int), sizeof(long), sizeof(long long),
    };
    const char *codes = is_signed ? "bhilq" : "BHILQ";
    const char *at = code == '\0' ? NULL : strchr(codes, code);
    return at == NULL ? 0 : sizes[at - codes];
}

/* Whether a buffer's items are native integers of ``size`` bytes and the given
 * signedness: one integer code whose native size is ``size``, and items of that size. */
static inline int
buffer_native_integers(const Py_buffer *b, Py_ssize_t size, int is_signed)
{
    return b->itemsize == size && buffer_integer_size(buffer_code(b), is_signed) == size;
}

/* Whether a buffer's items are native float64s ('d', 8 bytes an item). */
static inline int
buffer_native_float64(const Py_buffer *b)
{
    return b->itemsize == 8 && buffer_code(b) == 'd';
}

/* Whether a buffer starts at a multiple of ``alignment`` bytes (a power of two). */
static inline int
buffer_aligned(const Py_buffer *b, uintptr_t alignment)
{
    return ((uintptr_t)b->buf & (alignment - 1)) == 0;
}

#endif
