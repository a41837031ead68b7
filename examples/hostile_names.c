/*
 * hostile_names - threads whose names try to break whoever prints them.
 *
 * A thread may name itself anything up to 15 bytes (prctl(PR_SET_NAME)),
 * and perf prints the name as it is: in each event's header, in the
 * scheduler tracepoints' comm fields, in its COMM records.  Each worker takes
 * one of the names below (cycling when -t asks for more), then waits the way
 * the other examples do: on one mutex held while working (futex waits) and in
 * short sleeps, so that every name has off-CPU stacks.  The main thread takes
 * one of the names too once the workers run (-m, default the terminal escape),
 * so the process (its comm, what `offcpu record --pid` names the target)
 * carries it.
 *
 * Not a pathology to fix: a test program for offcpu's parser and renderers.
 */
#include "common.h"

#include <sys/prctl.h>

static const char *const NAMES[] = {
    "<script>",               /* markup */
    "it's \"quoted\"",        /* both quotes */
    "a;b c; d",               /* the folded format's separator, and spaces */
    "tab\there\nnl",          /* a tab and a newline */
    /* 8 x U+0105 is 16 bytes: the kernel keeps 15, cutting the last character in half */
    "\xc4\x85\xc4\x85\xc4\x85\xc4\x85\xc4\x85\xc4\x85\xc4\x85\xc4\x85",
    "--\x1b[31mred",          /* a terminal escape (red), after what reads as an option */
    "\n\tfff fake",           /* after a newline, looks like a call chain line */
    "a pid=1 prio=2",         /* looks like sched_waking's fields */
    "x prev_pid=1 y",         /* looks like sched_switch's fields */
    "z next_pid=1 \n",        /* ...and its last ones, then a new line */
    "carriage\rret",          /* a carriage return, which ends no line */
    "",                       /* no name at all */
    /* ends a JavaScript string quoted with ' where only ' is escaped, then runs alert(1) */
    "\\'),alert(1)//",
    "\\",                     /* a lone backslash, which escapes whatever follows it */
    "\"><b onclick=x>",      /* ends an HTML attribute, then opens an element */
    "</title><b>&amp",        /* ends an SVG's <title>, an entity */
    "`${alert(2)}`",          /* a JavaScript template literal */
    "\x1b[2J\x1b]0;PWNED\x07",  /* clears a terminal, then sets its title, ended by BEL */
    "\nTID 1: x",             /* looks like eu-stack's thread header, after a newline */
    "\xe2\x80\xaegnp.exe",    /* U+202E RIGHT-TO-LEFT OVERRIDE: shows as "exe.png" */
    "\xff\xfe not utf8",      /* bytes that are no UTF-8 at all */
};
#define NAME_COUNT (int)(sizeof(NAMES) / sizeof(NAMES[0]))
#define ESCAPE_NAME 5         /* the main thread's, unless -m says */
#define WORK_ROUNDS 2000      /* done under the lock: the others queue for it */
#define SLEEP_EVERY 64        /* lock rounds between two sleeps */
#define SLEEP_S 0.001

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long shared_state = 1; /* protected by lock */

static void *worker(void *arg)
{
    struct ex_slot *slot = arg;
    while (!ex_stopped()) {
        for (int i = 0; i < SLEEP_EVERY && !ex_stopped(); i++) {
            pthread_mutex_lock(&lock);
            shared_state = ex_spin(shared_state, WORK_ROUNDS);
            pthread_mutex_unlock(&lock);
            slot->ops++;
        }
        ex_sleep(SLEEP_S);
    }
    return NULL;
}

/* prctl names the calling thread; names over 15 bytes are cut by the kernel, not refused */
static void name_self(const char *name)
{
    prctl(PR_SET_NAME, name, 0, 0, 0);
}

static void *named_worker(void *arg)
{
    struct ex_slot *slot = arg;
    name_self(NAMES[slot->sink % NAME_COUNT]);
    return worker(slot);
}

int main(int argc, char **argv)
{
    struct ex_opts o = {.name = "hostile_names", .threads = NAME_COUNT,
                        .max_threads = 1024, .seconds = 5,
                        .extra_flag = 'm', .extra_arg = "INDEX",
                        .extra_help = "which name the main thread takes (4: the cut one)",
                        .extra = ESCAPE_NAME, .extra_max = NAME_COUNT - 1};
    ex_parse(argc, argv, &o);

    struct ex_slot *slots = ex_alloc_slots(o.threads);
    for (int i = 0; i < o.threads; i++) {
        slots[i].sink = (unsigned long)i; /* which name: set before the thread starts */
        ex_create(&o, &slots[i].tid, named_worker, &slots[i]);
    }
    name_self(NAMES[o.extra]);
    ex_run_for(&o);
    ex_summary(&o, ex_join_workers(&o, slots), " names=%d", NAME_COUNT);
    return 0;
}
