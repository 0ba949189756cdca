/* Private to serve/: preset tables of model shapes and GPU specs. */
#ifndef KVIO_SERVE_INT_H
#define KVIO_SERVE_INT_H

#include "kvio/cost.h"

/* Returns the preset called name, or NULL (borrowed, static). */
const kvio_model_t *kvio_model_preset_find(const char *name);
const kvio_gpu_t *kvio_gpu_preset_find(const char *name);

/* Writes "a, b, c" of the known preset names. */
void kvio_model_preset_names(char *text_p, size_t text_len);
void kvio_gpu_preset_names(char *text_p, size_t text_len);

#endif
