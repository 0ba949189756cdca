/* A device domain's last error (kvio_device_error reads it), set by the
 * domain's code and by the CUDA calls that fail under it. */
#include "core/gpu_int.h"

#include <stdarg.h>
#include <stdio.h>

void kvio_device_set_error(kvio_device_t *device, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vsnprintf(device->error, sizeof(device->error), fmt, args);
    va_end(args);
}
