/* A model's tensor list from its shape, in checkpoint order: per layer the
 * attention projections, the MLP or the MoE router and experts, two norms;
 * then the embedding, the final norm and the LM head (unless tied). Names
 * follow Hugging Face checkpoints. */
#include "kvio/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char *const kind_names[] = {"attention", "mlp", "router", "norm", "embedding"};

const char *kvio_tensor_kind_name(int kind)
{
    return kind >= 0 && kind < (int)(sizeof(kind_names) / sizeof(kind_names[0]))
               ? kind_names[kind]
               : "?";
}

typedef struct tensor_list {
    kvio_tensor_t *items;
    size_t count, capacity;
    double element_bytes;   /* the layers' weights */
    double embedding_bytes; /* the embedding and LM head */
    kvio_status_t status;
} tensor_list_t;

static void add(tensor_list_t *list, int layer, int expert, int kind, uint64_t rows,
                uint64_t columns, const char *name)
{
    if (list->status != KVIO_OK)
        return;
    if (list->count == list->capacity) {
        size_t capacity = list->capacity ? 2 * list->capacity : 256;
        kvio_tensor_t *items = realloc(list->items, capacity * sizeof(*items));
        if (items == NULL) {
            list->status = KVIO_ERR_NOMEM;
            return;
        }
        list->items = items;
        list->capacity = capacity;
    }
    kvio_tensor_t *tensor = &list->items[list->count++];
    snprintf(tensor->name, sizeof(tensor->name), "%s", name);
    tensor->layer = layer;
    tensor->expert = expert;
    tensor->kind = kind;
    tensor->rows = rows;
    tensor->columns = columns;
    double element_bytes = kind == KVIO_TENSOR_EMBEDDING ? list->embedding_bytes
                                                         : list->element_bytes;
    tensor->bytes = (uint64_t)llround((double)rows * (double)columns * element_bytes);
}

/* One MLP's (or expert's) gate, up and down projections. */
static void add_mlp(tensor_list_t *list, int layer, int expert, uint64_t hidden,
                    uint64_t intermediate)
{
    static const char *const parts[] = {"gate_proj", "up_proj", "down_proj"};
    for (int p = 0; p < 3; p++) {
        char name[80];
        if (expert >= 0)
            snprintf(name, sizeof(name), "model.layers.%d.mlp.experts.%d.%s.weight", layer,
                     expert, parts[p]);
        else
            snprintf(name, sizeof(name), "model.layers.%d.mlp.%s.weight", layer, parts[p]);
        add(list, layer, expert, KVIO_TENSOR_MLP, p < 2 ? intermediate : hidden,
            p < 2 ? hidden : intermediate, name);
    }
}

kvio_status_t kvio_model_tensors(const kvio_model_t *model, kvio_tensor_t **tensors_p,
                                 size_t *count_p)
{
    double element_bytes = model->weight_dtype_bytes > 0 ? model->weight_dtype_bytes
                                                         : model->dtype_bytes;
    tensor_list_t list = {.element_bytes = element_bytes > 0 ? element_bytes : 2};
    list.embedding_bytes =
        model->embedding_dtype_bytes > 0 ? model->embedding_dtype_bytes : list.element_bytes;
    uint64_t hidden = (uint64_t)model->hidden;
    uint64_t q_width = (uint64_t)(model->heads * model->head_dim);
    uint64_t kv_width = (uint64_t)(model->kv_heads * model->head_dim);
    char name[80];
    add(&list, -1, -1, KVIO_TENSOR_EMBEDDING, (uint64_t)model->vocab, hidden,
        "model.embed_tokens.weight");
    for (int layer = 0; layer < (int)model->layers; layer++) {
        struct {
            const char *part;
            uint64_t rows, columns;
        } attention[] = {{"q_proj", q_width, hidden},
                         {"k_proj", kv_width, hidden},
                         {"v_proj", kv_width, hidden},
                         {"o_proj", hidden, q_width}};
        snprintf(name, sizeof(name), "model.layers.%d.input_layernorm.weight", layer);
        add(&list, layer, -1, KVIO_TENSOR_NORM, 1, hidden, name);
        for (int a = 0; a < 4; a++) {
            snprintf(name, sizeof(name), "model.layers.%d.self_attn.%s.weight", layer,
                     attention[a].part);
            add(&list, layer, -1, KVIO_TENSOR_ATTENTION, attention[a].rows, attention[a].columns,
                name);
        }
        snprintf(name, sizeof(name), "model.layers.%d.post_attention_layernorm.weight", layer);
        add(&list, layer, -1, KVIO_TENSOR_NORM, 1, hidden, name);
        if (model->num_experts > 0) {
            snprintf(name, sizeof(name), "model.layers.%d.mlp.gate.weight", layer);
            add(&list, layer, -1, KVIO_TENSOR_ROUTER, (uint64_t)model->num_experts, hidden,
                name);
            for (int expert = 0; expert < (int)model->num_experts; expert++)
                add_mlp(&list, layer, expert, hidden, (uint64_t)model->intermediate);
        } else {
            add_mlp(&list, layer, -1, hidden, (uint64_t)model->intermediate);
        }
    }
    add(&list, -1, -1, KVIO_TENSOR_NORM, 1, hidden, "model.norm.weight");
    if (!model->tied_embeddings)
        add(&list, -1, -1, KVIO_TENSOR_EMBEDDING, (uint64_t)model->vocab, hidden,
            "lm_head.weight");
    if (list.status != KVIO_OK) {
        free(list.items);
        return list.status;
    }
    *tensors_p = list.items;
    *count_p = list.count;
    return KVIO_OK;
}
