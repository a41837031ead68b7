/**
 * java_monitor - threads on one synchronized monitor, with the work inside it.
 *
 * Every worker updates one shared object in a synchronized method and does
 * most of its work there (think: a synchronized cache or counter map). Only
 * one thread at a time runs it; the others spin for a moment in HotSpot's
 * ObjectMonitor and then park until the owner leaves:
 *
 *   futex_wait <- pthread_cond_wait <- PlatformEvent::park <- ObjectMonitor::EnterI
 *     <- ObjectMonitor::enter <- ObjectSynchronizer::enter <- SharedRuntime::complete_monitor_locking_C
 *
 * Fixed twin: MonitorContentionFixed (state per thread, no shared monitor).
 */
public final class MonitorContention {
    static final int INSIDE_ROUNDS = 40_000; // some tens of us holding the monitor
    static final int OUTSIDE_ROUNDS = 2_000; // and a little without it

    private static long shared = 1; // guarded by MonitorContention.class

    /** The work done holding the monitor: the bug. */
    static synchronized void update() {
        shared = Example.spin(shared, INSIDE_ROUNDS);
    }

    public static void main(String[] args) throws InterruptedException {
        Example example = Example.parse("java_monitor", 8, args);
        example.run(index -> stop -> {
            long ops = 0;
            long own = index;
            while (!stop.get()) {
                update();
                own = Example.spin(own, OUTSIDE_ROUNDS);
                ops++;
            }
            return ops + (own == 42 ? 1 : 0); // own is used, so the work outside is not optimised away
        });
    }
}
