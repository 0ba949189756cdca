/* Private to model/: the preset tables' look-ups (model/presets.c). */
#ifndef KVIO_MODEL_INT_H
#define KVIO_MODEL_INT_H

#include "kvio/model.h"

/* Returns the preset called name, or NULL (borrowed, static). */
const kvio_model_t *kvio_model_preset_find(const char *name);
const kvio_gpu_t *kvio_gpu_preset_find(const char *name);

/* Writes "a, b, c" of the known preset names. */
void kvio_model_preset_names(char *text_p, size_t text_len);
void kvio_gpu_preset_names(char *text_p, size_t text_len);

#endif
