import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.kafka.common.utils.Exit;

/**
 * Runs Kafka's command-line tools one after another in this one JVM, unmodified: each
 * request names a tool's main class, its arguments and its standard input; the answer is
 * its exit status and what it printed. Starting a JVM per tool run cost seconds of class
 * loading and compilation each, most of tests/kafka_reference's time.
 *
 * Invariants: requests run one at a time, in order. A tool's System.in, System.out and
 * System.err (and Scala's Console, which captured them at its start) are the request's
 * for the whole run. Exit.exit and Exit.halt, which every Kafka tool calls to end,
 * end only the run, with that status; an exception out of main is status 1 with its stack
 * trace on stderr, as the java launcher does. The shutdown hooks a tool adds through
 * Exit.addShutdownHook run when it ends, as at a JVM's exit.
 *
 * Wire format, on the process's own stdin and stdout (big-endian, as DataInput):
 * request = int n, then n byte strings (the main class, then its arguments), then one byte
 * string for stdin; answer = int status, byte string stdout, byte string stderr; a byte
 * string is an int length and that many bytes (UTF-8). End of stdin ends the process.
 */
public final class KafkaTools {
    /** The status a tool passed to Exit.exit or Exit.halt, thrown out of the tool. */
    static final class ToolExit extends Error {
        final int status;

        ToolExit(int status) {
            super("exit " + status, null, false, false);
            this.status = status;
        }
    }

    /** An output stream whose destination is the current request's; once the tool has
     *  called Exit.exit, what its own thread prints goes nowhere (it would not have run). */
    static final class Switched extends OutputStream {
        volatile OutputStream target = OutputStream.nullOutputStream();

        private boolean dropped() {
            return exitStatus != null && Thread.currentThread() == toolThread;
        }

        @Override public void write(int b) throws java.io.IOException {
            if (!dropped()) target.write(b);
        }

        @Override public void write(byte[] b, int off, int len) throws java.io.IOException {
            if (!dropped()) target.write(b, off, len);
        }
    }

    /** An input stream whose source is the current request's stdin. */
    static final class SwitchedIn extends InputStream {
        volatile InputStream source = InputStream.nullInputStream();

        @Override public int read() throws java.io.IOException { return source.read(); }
        @Override public int read(byte[] b, int off, int len) throws java.io.IOException { return source.read(b, off, len); }
        @Override public int available() throws java.io.IOException { return source.available(); }
    }

    static final Switched out = new Switched(), err = new Switched();
    static final SwitchedIn in = new SwitchedIn();
    /** The thread that runs the tools' main methods. */
    static final Thread toolThread = Thread.currentThread();
    /** The status of the run's first Exit.exit or Exit.halt; null while it has made none. */
    static volatile Integer exitStatus;
    static volatile boolean halted;
    /** The shutdown hooks the run added (Exit.addShutdownHook): run at its end. */
    static final List<Thread> hooks = new ArrayList<>();

    /** As System.exit ends a JVM: the first call's status is the run's, whatever code that
     *  catches the ToolExit does next (some tools catch Throwable), and nothing it prints
     *  afterwards is the run's output. */
    static synchronized void exit(int status) {
        if (exitStatus == null) {
            exitStatus = status;
            System.out.flush();
            System.err.flush();
        }
        throw new ToolExit(status);
    }

    /** As the JVM does when it exits: the hooks run at once, each in its own thread (the
     *  console producer's closes its producer, which sends what it still holds). */
    static void runShutdownHooks() throws InterruptedException {
        List<Thread> added;
        synchronized (hooks) {
            added = new ArrayList<>(hooks);
            hooks.clear();
        }
        for (Thread hook : added) {
            hook.start();
        }
        for (Thread hook : added) {
            hook.join();
        }
    }

    public static void main(String[] ignored) throws Exception {
        DataInputStream requests = new DataInputStream(new BufferedInputStream(new FileInputStream(FileDescriptor.in)));
        DataOutputStream answers = new DataOutputStream(new BufferedOutputStream(new FileOutputStream(FileDescriptor.out)));
        // Before any tool's class (or Scala's Console) reads them.
        System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
        System.setIn(in);
        Exit.setExitProcedure((status, message) -> exit(status));
        Exit.setHaltProcedure((status, message) -> {
            halted = true;                  // Runtime.halt runs no hooks
            exit(status);
        });
        Exit.setShutdownHookAdder((name, hook) -> {
            synchronized (hooks) {
                hooks.add(name == null ? new Thread(hook) : new Thread(hook, name));
            }
        });
        while (true) {
            String[] words;
            byte[] stdin;
            try {
                words = new String[requests.readInt()];
            } catch (EOFException end) {
                System.exit(0);             // not waiting for threads a tool left behind
                return;
            }
            for (int i = 0; i < words.length; i++) {
                words[i] = new String(bytes(requests), StandardCharsets.UTF_8);
            }
            stdin = bytes(requests);
            ByteArrayOutputStream printed = new ByteArrayOutputStream(), errors = new ByteArrayOutputStream();
            out.target = printed;
            err.target = errors;
            in.source = new ByteArrayInputStream(stdin);
            exitStatus = null;
            halted = false;
            int status = run(words);
            if (halted) {
                hooks.clear();
            }
            runShutdownHooks();
            System.out.flush();
            System.err.flush();
            if (exitStatus != null) {
                status = exitStatus;
            }
            out.target = OutputStream.nullOutputStream();    // a tool's leftover thread prints nowhere
            err.target = OutputStream.nullOutputStream();
            in.source = InputStream.nullInputStream();
            answers.writeInt(status);
            write(answers, printed.toByteArray());
            write(answers, errors.toByteArray());
            answers.flush();
        }
    }

    static int run(String[] words) {
        try {
            Class.forName(words[0]).getMethod("main", String[].class)
                    .invoke(null, (Object) Arrays.copyOfRange(words, 1, words.length));
            return 0;
        } catch (InvocationTargetException thrown) {
            Throwable cause = thrown.getCause();
            if (exitStatus != null) {
                return exitStatus;
            }
            System.err.print("Exception in thread \"main\" ");
            cause.printStackTrace();
            return 1;
        } catch (ToolExit exit) {           // from a static initializer
            return exitStatus;
        } catch (ReflectiveOperationException | LinkageError missing) {
            System.err.println("Error: could not run " + words[0] + ": " + missing);
            return 1;
        }
    }

    static byte[] bytes(DataInputStream from) throws java.io.IOException {
        byte[] data = new byte[from.readInt()];
        from.readFully(data);
        return data;
    }

    static void write(DataOutputStream to, byte[] data) throws java.io.IOException {
        to.writeInt(data.length);
        to.write(data);
    }
}
