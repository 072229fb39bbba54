/* host_device.h: a host-memory implementation of libdiloco's device hooks (diloco_device_ops), for
 * testing.
 *
 * It does on the CPU what a GPU trainer does on its device (worker/cuda/diloco_cuda.cu): it keeps its
 * own snapshot of the global parameters, computes the pseudo-gradient snapshot - params and its bf16
 * cast with a finite check, and loads new global parameters into the snapshot and the trainer's
 * buffer. bin/worker --device-hooks host uses it with the trainer's host buffer as the "device"
 * parameters and gives libdiloco no params pointer at all, so a run proves that libdiloco's device
 * path reaches every place that touches params when there are no hooks, with the same bytes (tests/it_device_hooks.sh). */
#ifndef DILOCO_HOST_DEVICE_H
#define DILOCO_HOST_DEVICE_H

#include <stddef.h>

#include "diloco.h"

typedef struct host_device host_device;

/* params: the trainer's buffer of numel floats (the "device" parameters; not owned). */
host_device *host_device_create(float *params, size_t numel, char *err, size_t errlen);
void host_device_free(host_device *h);
/* Fill ops with the hooks (ctx = h). */
void host_device_ops(host_device *h, diloco_device_ops *ops);
/* Calls of each hook so far: delta, load by mode (DILOCO_LOAD_SNAPSHOT, _COPY, _MIX). */
void host_device_counts(const host_device *h, unsigned long *delta, unsigned long load[3]);

#endif
