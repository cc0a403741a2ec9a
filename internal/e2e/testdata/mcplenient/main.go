// Command mcplenient is an MCP server of an older release of the official Go SDK, whose JSON
// reading is lenient (v1.2.0 folds the case of keys; v1.3.1 reads "name\u0000" as "name"), for
// lockhttp's end-to-end tests: it serves the tools read and delete at /mcp over TLS, statelessly
// and with JSON answers, and counts the calls each tool ran at /count.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"net"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	cert := flag.String("cert", "", "TLS certificate (PEM)")
	key := flag.String("key", "", "TLS key (PEM)")
	flag.Parse()

	var mu sync.Mutex
	ran := map[string]int{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "lenient", Version: "1"}, nil)
	for _, name := range []string{"read", "delete"} {
		srv.AddTool(&mcp.Tool{Name: name, Description: name, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				mu.Lock()
				ran[req.Params.Name]++
				mu.Unlock()
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran " + req.Params.Name}}}, nil
			})
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	mux.HandleFunc("GET /count", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		json.NewEncoder(w).Encode(ran)
	})
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("listening on %s", l.Addr()) // the test reads the address from this line
	log.Fatal(http.ServeTLS(l, mux, *cert, *key))
}
