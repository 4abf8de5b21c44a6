import java.sql.*;
import java.util.*;

/**
 * PgJDBC against Lockstep's PostgreSQL listener (tests/cli/pg_jdbc.rs): runs its checks against
 * the URL in args[0] and prints one key=value line per check, which the Rust test compares.
 */
public class LockstepJdbc {
  public static void main(String[] args) throws Exception {
    Properties props = new Properties();
    props.setProperty("user", "jdbc");
    try (Connection c = DriverManager.getConnection(args[0], props)) {
      try (Statement s = c.createStatement();
           ResultSet r = s.executeQuery("SELECT CAST('inf' AS DOUBLE) AS a, CAST('-inf' AS DOUBLE) AS b, "
               + "CAST('nan' AS DOUBLE) AS c, CAST('-0' AS DOUBLE) AS d, CAST(1e20 AS DOUBLE) AS e")) {
        r.next();
        StringJoiner j = new StringJoiner(",");
        for (int i = 1; i <= 5; i++) j.add(Double.toString(r.getDouble(i)));
        System.out.println("specials=" + j);
      }
      // Past prepareThreshold (5) the driver prepares on the server and reads binary results.
      StringJoiner counts = new StringJoiner(",");
      try (PreparedStatement p = c.prepareStatement("SELECT count(*) FROM samples WHERE host = ANY(?::text[])")) {
        for (int i = 0; i < 7; i++) {
          p.setString(1, "{node-01,node-02}");
          try (ResultSet r = p.executeQuery()) { r.next(); counts.add(Long.toString(r.getLong(1))); }
        }
      }
      System.out.println("setString_any=" + counts);
      try (PreparedStatement p = c.prepareStatement("SELECT count(*) FROM samples WHERE host = ANY(?)")) {
        p.setArray(1, c.createArrayOf("text", new String[] {"node-01", "node-02"}));
        try (ResultSet r = p.executeQuery()) { r.next(); System.out.println("setArray_any=" + r.getLong(1)); }
      }
      StringJoiner rows = new StringJoiner(";");
      try (PreparedStatement p = c.prepareStatement("SELECT time, value FROM samples WHERE metric = ? "
          + "ORDER BY time, host LIMIT 2")) {
        for (int i = 0; i < 7; i++) {
          p.setString(1, "train_step_duration_seconds");
          try (ResultSet r = p.executeQuery()) {
            StringJoiner one = new StringJoiner(",");
            while (r.next()) {
              Timestamp t = r.getTimestamp(1);
              long micros = Math.floorDiv(t.getTime(), 1000L) * 1_000_000L + t.getNanos() / 1000;
              one.add(micros + "=" + Double.doubleToLongBits(r.getDouble(2)));
            }
            rows.add(one.toString());
          }
        }
      }
      System.out.println("timestamps=" + rows);
      // setDate and setTime send a zone ('2026-03-02 +00', '09:01:00+00'), which PostgreSQL
      // ignores for these types.
      try (PreparedStatement p = c.prepareStatement("SELECT count(*) FROM samples WHERE CAST(time AS DATE) = ?")) {
        p.setDate(1, java.sql.Date.valueOf("2026-03-02"));
        try (ResultSet r = p.executeQuery()) { r.next(); System.out.println("setDate=" + r.getLong(1)); }
      }
      try (PreparedStatement p = c.prepareStatement("SELECT count(*) FROM samples WHERE time >= ?")) {
        p.setDate(1, java.sql.Date.valueOf("2026-03-02"));
        try (ResultSet r = p.executeQuery()) { r.next(); System.out.println("setDate_timestamp=" + r.getLong(1)); }
      }
      try (PreparedStatement p = c.prepareStatement("SELECT count(*) FROM samples WHERE CAST(time AS TIME) >= ?")) {
        p.setTime(1, java.sql.Time.valueOf("09:01:00"));
        try (ResultSet r = p.executeQuery()) { r.next(); System.out.println("setTime=" + r.getLong(1)); }
      }
      c.setAutoCommit(false);
      try (Statement s = c.createStatement()) {
        s.setFetchSize(100);
        int n = 0;
        try (ResultSet r = s.executeQuery("SELECT host, value FROM samples ORDER BY time, host LIMIT 1000")) {
          while (r.next()) n++;
        }
        System.out.println("fetched=" + n);
      }
      c.setAutoCommit(true);
      try (Statement s = c.createStatement()) {
        s.executeQuery("SELEC 1");
      } catch (SQLException e) {
        System.out.println("error=" + e.getSQLState());
      }
      System.out.println("version=" + c.getMetaData().getDatabaseProductVersion());
    }
  }
}
