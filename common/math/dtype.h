/* dtype.h: the element types of a payload (enum blob_dtype), one number each on the wire.
 *
 * Every blob header carries one (format/blob.h) and every codec is one (codec.h), so the numbers sit
 * here, below both: the codecs know them without knowing the blob format above them. */
#ifndef DILOCO_DTYPE_H
#define DILOCO_DTYPE_H

/* BLOB_I8, BLOB_I4, BLOB_I3, BLOB_I2: block-quantized pseudo-gradients (codec.h), whose size is not
 * count * element size. BLOB_DTYPE_MAX is the largest dtype a blob may carry. */
/* BLOB_TOPK: top-k sparse pseudo-gradients and updates (codec_sparse.h), whose count is the payload's
 * length in bytes (the layout inside is the codec's). */
enum blob_dtype {
    BLOB_NONE = 0,
    BLOB_F32 = 1,
    BLOB_BF16 = 2,
    BLOB_I8 = 3,
    BLOB_I4 = 4,
    BLOB_I3 = 5,
    BLOB_I2 = 6,
    BLOB_TOPK = 7
};
#define BLOB_DTYPE_MAX BLOB_TOPK
#endif
