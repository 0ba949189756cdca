/* A model's weights as the tensors a trainer sends to inference ranks (the
 * unit weight sync moves): per layer the attention projections (q, k, v,
 * o), the MLP (gate, up, down) or the MoE router and each expert's three
 * projections, two norms; then the embedding, the final norm and the LM
 * head (unless tied). Names follow Hugging Face checkpoints. */
#ifndef KVIO_TENSORS_H
#define KVIO_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "kvio/cost.h"
#include "kvio/status.h"

typedef enum {
    KVIO_TENSOR_ATTENTION = 0, /* q, k, v, o projections */
    KVIO_TENSOR_MLP,           /* a dense MLP's, or one expert's, projections */
    KVIO_TENSOR_ROUTER,        /* an MoE layer's gate */
    KVIO_TENSOR_NORM,
    KVIO_TENSOR_EMBEDDING,     /* the token embedding and the LM head */
} kvio_tensor_kind_t;

typedef struct kvio_tensor {
    char name[80];
    int32_t layer;   /* -1: not in a layer */
    int32_t expert;  /* -1: not an expert's */
    int kind;        /* kvio_tensor_kind_t */
    uint64_t rows, columns;
    uint64_t bytes;  /* rows x columns x the weights' bytes per element (rounded) */
} kvio_tensor_t;

/* The tensors of a resolved model, in checkpoint order (malloc'd; free
 * *tensors_p). Their elements, norms aside, add up to kvio_model_params. */
kvio_status_t kvio_model_tensors(const kvio_model_t *model, kvio_tensor_t **tensors_p,
                                 size_t *count_p);

/* Name of a kind ("attention", ...). */
const char *kvio_tensor_kind_name(int kind);

#endif
