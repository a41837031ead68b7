/**
 * java_deadlock_fixed - the twin of java_deadlock: every worker takes LEFT
 * before RIGHT, one order for all, so none can hold one and wait for the
 * other's holder. They take turns at the two monitors and finish.
 */
public final class JavaDeadlockFixed {
    public static void main(String[] args) throws InterruptedException {
        JavaDeadlock.run("java_deadlock_fixed", args, index -> true);
    }
}
