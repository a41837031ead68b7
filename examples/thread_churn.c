/*
 * thread_churn - "spawn a thread for every little task" with big stacks.
 *
 * Each submitter thread loops: pthread_create a child with a large stack
 * (64 MiB by default, -S MIB), the child sums a small array, the submitter
 * joins it.  Thread creation is far more expensive than the task:
 *   - glibc keeps freed stacks in a cache guarded by one process-wide lock
 *     (stack_cache_lock), taken by allocate_stack/get_cached_stack on create
 *     and by __nptl_deallocate_stack on join: threads block in
 *     __lll_lock_wait_private -> futex_wait.
 *   - The cache holds only 40 MiB of stacks in total; stacks that don't fit
 *     are munmap'ed *while holding stack_cache_lock*, and new ones are
 *     mmap'ed + mprotect'ed (guard page): mmap_lock contention on top.
 * How hard it bites depends on how many stacks are in flight versus that
 * 40 MiB.  On a small (2-core) box, 16 MiB stacks mostly hit the cache and
 * submitters mostly wait in pthread_join; the default 64 MiB (bigger than
 * the whole cache) makes every join munmap under the lock, so
 * __lll_lock_wait_private dominates as it did in the TiFlash story.
 *
 * Fixed twin: thread_churn_fixed.c (create the workers once, run tasks in a
 * loop).
 */
#include "common.h"

#define TASK_LEN 256

static size_t stack_bytes;

/* The tiny task: sum a small array that lives on the child's stack. */
static void *child(void *arg)
{
    unsigned long seed = (unsigned long)(uintptr_t)arg, sum = 0;
    unsigned int a[TASK_LEN];
    for (int i = 0; i < TASK_LEN; i++)
        a[i] = (unsigned int)(seed + i * 2654435761u);
    for (int i = 0; i < TASK_LEN; i++)
        sum += ((volatile unsigned int *)a)[i];
    return (void *)(uintptr_t)sum;
}

static void *submitter(void *arg)
{
    struct ex_slot *slot = arg;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, stack_bytes);

    while (!ex_stopped()) {
        pthread_t t;
        int err = pthread_create(&t, &attr, child, (void *)(uintptr_t)slot->ops);
        if (err) {
            /* Out of threads or address space: back off instead of dying. */
            if (err != EAGAIN && err != ENOMEM) {
                fprintf(stderr, "thread_churn: pthread_create: %s\n", strerror(err));
                exit(1);
            }
            ex_sleep(0.001);
            continue;
        }
        void *ret;
        pthread_join(t, &ret);
        slot->sink += (unsigned long)(uintptr_t)ret;
        slot->ops++;
    }
    pthread_attr_destroy(&attr);
    return NULL;
}

int main(int argc, char **argv)
{
    struct ex_opts o = {.name = "thread_churn", .threads = 64, .max_threads = 512,
                        .seconds = 5, .extra_flag = 'S', .extra_arg = "MIB",
                        .extra_help = "child thread stack size in MiB",
                        .extra = 64, .extra_max = 256};
    ex_parse(argc, argv, &o);
    stack_bytes = (size_t)o.extra << 20;

    struct ex_slot *slots = ex_start_workers(&o, NULL, submitter);

    ex_run_for(&o);

    unsigned long long ops = ex_join_workers(&o, slots);
    ex_summary(&o, ops, " stack_mib=%ld", o.extra);
    return 0;
}
