/* fcfs (vLLM's default): the waiting queue as it arrived, preempted
 * requests at its head; the last admitted request is preempted first. */
#include "sched/sched_int.h"

const kvio_sched_policy_ops_t kvio_policy_fcfs = {
    .plugin = {.name = "fcfs", .help = "first come, first served (vLLM's default)",
               .options = kvio_no_options},
};
