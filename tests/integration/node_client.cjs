// Node's DuckDB client (@duckdb/node-api), a client we did not write: LOAD the extension, point it
// at a server, and print embed_text's type and vector for one text as JSON.
// Usage: NODE_PATH=.../node_modules node node_client.cjs EXTENSION TARGET TEXT
const { DuckDBInstance } = require("@duckdb/node-api");

async function main() {
  const [extension, target, text] = process.argv.slice(2);
  const instance = await DuckDBInstance.create(":memory:", { allow_unsigned_extensions: "true" });
  const con = await instance.connect();
  await con.run(`LOAD '${extension}'`);
  await con.run(`SET embedtext_target = '${target}'`);
  await con.run("SELECT embedtext_connect()");
  const reader = await con.runAndReadAll("SELECT typeof(embed_text($1)) AS type, embed_text($1) AS vector", [text]);
  console.log(JSON.stringify(reader.getRowObjectsJson()[0]));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
