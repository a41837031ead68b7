/*
 * thread_churn_fixed - twin of thread_churn, done the right way.
 *
 * Same tiny task (sum a small array), but the threads are created once and
 * each one runs tasks in a loop: a pool of T workers with one private task
 * stream each, so there is no create/join per task, no stack cache lock, no
 * stack mmap/munmap and no shared queue to fight over.  The workers use the
 * same stack size as the churning version to show that stack size was not
 * the problem -- allocating it per task was.
 */
#include "common.h"

#define TASK_LEN 256

static unsigned long task(unsigned long seed)
{
    unsigned int a[TASK_LEN];
    unsigned long sum = 0;
    for (int i = 0; i < TASK_LEN; i++)
        a[i] = (unsigned int)(seed + i * 2654435761u);
    for (int i = 0; i < TASK_LEN; i++)
        sum += ((volatile unsigned int *)a)[i];
    return sum;
}

static void *worker(void *arg)
{
    struct ex_slot *slot = arg;
    while (!ex_stopped()) {
        slot->sink += task(slot->ops);
        slot->ops++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    struct ex_opts o = {.name = "thread_churn_fixed", .threads = 64, .max_threads = 512,
                        .seconds = 5, .extra_flag = 'S', .extra_arg = "MIB",
                        .extra_help = "worker thread stack size in MiB",
                        .extra = 16, .extra_max = 256};
    ex_parse(argc, argv, &o);

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)o.extra << 20);

    struct ex_slot *slots = ex_start_workers(&o, &attr, worker);
    pthread_attr_destroy(&attr);

    ex_run_for(&o);

    unsigned long long ops = ex_join_workers(&o, slots);
    ex_summary(&o, ops, " stack_mib=%ld", o.extra);
    return 0;
}
