// Go's DuckDB client (github.com/duckdb/duckdb-go/v2), a client we did not write: LOAD the
// extension, point it at a server, and print embed_text's type and vector for one text as JSON.
// Usage: go_client EXTENSION TARGET TEXT (built by .ci/run: go build -o .ci/cache/go_client).
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"

	_ "github.com/duckdb/duckdb-go/v2"
)

func main() {
	extension, target, text := os.Args[1], os.Args[2], os.Args[3]
	db, err := sql.Open("duckdb", "?allow_unsigned_extensions=true")
	check(err)
	defer db.Close()
	ctx := context.Background()
	// One connection: database/sql pools them, and SET applies to the connection it runs on.
	con, err := db.Conn(ctx)
	check(err)
	defer con.Close()
	for _, statement := range []string{
		fmt.Sprintf("LOAD '%s'", extension),
		fmt.Sprintf("SET embedtext_target = '%s'", target),
		"SELECT embedtext_connect()",
	} {
		_, err = con.ExecContext(ctx, statement)
		check(err)
	}
	var kind string
	var vector any // FLOAT[384] scans as []any of float32
	err = con.QueryRowContext(ctx, "SELECT typeof(embed_text($1)), embed_text($1)", text).Scan(&kind, &vector)
	check(err)
	out, err := json.Marshal(map[string]any{"type": kind, "vector": vector})
	check(err)
	fmt.Println(string(out))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
