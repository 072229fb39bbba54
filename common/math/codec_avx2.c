/* codec_avx2.c: the codec's block kernels (codec_kernels.h) compiled with -mavx2 (see the Makefile);
 * codec.c calls them only on a CPU that has AVX2. */
#include "math/codec_avx2.h"

#define CK(name) name##_avx2
#define CK_LINKAGE
#include "math/codec_kernels.h"
