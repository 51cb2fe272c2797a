import org.apache.kafka.tools.DumpLogSegments;

/**
 * ``DumpLogSegments --index-sanity-check`` on each file of the arguments in one JVM: the tool
 * stops at the first index that fails its check (the exception ends its main), so it runs once
 * per file here and a failure is printed as ``CorruptIndexException: message`` after the
 * file's ``Dumping`` line.
 */
public final class KprotoIndexSanity {
    public static void main(String[] args) throws Exception {
        for (String file : args) {
            try {
                DumpLogSegments.main(new String[] {"--index-sanity-check", "--files", file});
            } catch (Exception e) {
                System.out.println(e.getClass().getSimpleName() + ": " + e.getMessage());
            }
        }
        System.out.flush();
    }
}
