import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.ObjectSerializationCache;

/**
 * Reads lines "CLASS VERSION HEX" from stdin: each HEX is read by Kafka's generated CLASS at
 * VERSION (every byte consumed) and written again (the same bytes). Prints one "bad ..." line per
 * failure, then "checked N bad M".
 */
public class ReleaseClassesCheck {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        int n = 0, bad = 0;
        while ((line = in.readLine()) != null) {
            String[] f = line.split(" ", -1);
            n++;
            try {
                short version = Short.parseShort(f[1]);
                byte[] data = hex(f[2]);
                ByteBuffer buf = ByteBuffer.wrap(data);
                Message m = (Message) Class.forName(f[0])
                    .getConstructor(org.apache.kafka.common.protocol.Readable.class, short.class)
                    .newInstance(new ByteBufferAccessor(buf), version);
                if (buf.remaining() != 0) throw new IllegalStateException(buf.remaining() + " bytes left");
                ObjectSerializationCache cache = new ObjectSerializationCache();
                ByteBuffer out = ByteBuffer.allocate(m.size(cache, version));
                m.write(new ByteBufferAccessor(out), cache, version);
                if (out.remaining() != 0 || !Arrays.equals(out.array(), data))
                    throw new IllegalStateException("written back as other bytes");
            } catch (Throwable e) {
                bad++;
                Throwable t = e.getCause() != null ? e.getCause() : e;
                System.out.println("bad " + f[0] + " v" + f[1] + ": " + t);
            }
        }
        System.out.println("checked " + n + " bad " + bad);
    }

    static byte[] hex(String s) {
        byte[] b = new byte[s.length() / 2];
        for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        return b;
    }
}
