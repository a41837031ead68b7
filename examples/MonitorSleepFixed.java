/**
 * java_monitor_sleep_fixed - the twin of java_monitor_sleep: the same sleep,
 * made before entering the monitor, which then guards only the counter it
 * exists for. The workers sleep side by side.
 */
public final class MonitorSleepFixed {
    public static void main(String[] args) throws InterruptedException {
        Example example = Example.parse("java_monitor_sleep_fixed", 4, args);
        example.run(index -> stop -> {
            long ops = 0;
            while (!stop.get()) {
                MonitorSleep.pause();
                synchronized (MonitorSleep.MONITOR) {
                    ops++;
                }
            }
            return ops;
        });
    }
}
