// Java's DuckDB client (DuckDB's JDBC driver, org.duckdb:duckdb_jdbc), a client we did not write:
// LOAD the extension, point it at a server, and print embed_text's type and vector for one text as
// JSON. Usage: java -cp duckdb_jdbc.jar JavaClient.java EXTENSION TARGET TEXT
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.Properties;

public class JavaClient {
    public static void main(String[] args) throws Exception {
        String extension = args[0], target = args[1], text = args[2];
        Properties config = new Properties();
        config.setProperty("allow_unsigned_extensions", "true");
        try (Connection con = DriverManager.getConnection("jdbc:duckdb:", config);
                Statement statement = con.createStatement()) {
            statement.execute("LOAD '" + extension + "'");
            statement.execute("SET embedtext_target = '" + target + "'");
            statement.execute("SELECT embedtext_connect()");
            try (PreparedStatement query =
                    con.prepareStatement("SELECT typeof(embed_text(?)), embed_text(?)")) {
                query.setString(1, text);
                query.setString(2, text);
                try (ResultSet row = query.executeQuery()) {
                    row.next();
                    Object[] vector = (Object[]) row.getArray(2).getArray();
                    StringBuilder json = new StringBuilder("{\"type\": \"" + row.getString(1) + "\", \"vector\": [");
                    for (int i = 0; i < vector.length; i++) {
                        json.append(i == 0 ? "" : ", ").append(vector[i]);
                    }
                    System.out.println(json.append("]}"));
                }
            }
        }
    }
}
