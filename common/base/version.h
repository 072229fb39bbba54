/* version.h: the version of the Redis Functions library (lua/00_header.lua, LIB_VERSION) this build speaks.
 * Every process checks `FCALL dl_version` against it and refuses to run against another one. */
#ifndef DILOCO_VERSION_H
#define DILOCO_VERSION_H
#define DL_LIB_VERSION "3"
#define DL_LIBRARY_NAME "diloco"
#endif
