/**
 * java_monitor_fixed - the twin of java_monitor: the same work, nothing shared.
 *
 * Each worker keeps its own state and takes no monitor another thread takes,
 * so the workers run side by side and wait only for a CPU. Run it with as many
 * threads as there are CPUs (the default, 2, is this machine's), the load it
 * can take.
 */
public final class MonitorContentionFixed {
    public static void main(String[] args) throws InterruptedException {
        Example example = Example.parse("java_monitor_fixed", 2, args);
        example.run(index -> stop -> {
            long ops = 0;
            long state = index;
            long own = index;
            while (!stop.get()) {
                state = Example.spin(state, MonitorContention.INSIDE_ROUNDS);
                own = Example.spin(own, MonitorContention.OUTSIDE_ROUNDS);
                ops++;
            }
            return ops + (state == own ? 1 : 0); // both are used, so no work is optimised away
        });
    }
}
