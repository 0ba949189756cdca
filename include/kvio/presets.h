/* Workload presets embedded in the binary (generated from
 * workloads/presets at build time). */
#ifndef KVIO_PRESETS_H
#define KVIO_PRESETS_H

typedef struct kvio_preset {
    const char *name;        /* file name without .yaml */
    const char *description; /* the file's first comment line */
    const char *text;        /* the YAML text */
} kvio_preset_t;

/* Terminated by an entry whose name is NULL. */
extern const kvio_preset_t kvio_presets[];

/* Returns the preset called name, or NULL. */
const kvio_preset_t *kvio_preset_find(const char *name);

#endif
