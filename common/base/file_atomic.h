/*
 * file_atomic.h: writing a file so that a reader (or a crash) sees either the old file or the whole new
 * one, never a part: the bytes go to a temporary file in the same folder, which is synced and renamed
 * over the target. Checkpoints (coordinator and GPT trainer) and prepared token files are written so.
 */
#ifndef DILOCO_FILE_ATOMIC_H
#define DILOCO_FILE_ATOMIC_H

#include <stddef.h>

typedef struct file_chunk {
    const void *p;
    size_t len;
} file_chunk;

/* Write the chunks, in order, to path: into path.tmp.<pid>, fsync, rename over path, fsync the folder.
 * 0, or -1 with err saying what failed (the temporary file is removed). */
int file_write_atomic(const char *path, const file_chunk *chunks, int nchunks, char *err, size_t errlen);

#endif
