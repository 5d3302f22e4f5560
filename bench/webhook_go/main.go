// A no-op admission webhook in Go, for bench/webhook_bench.py: the least any webhook can cost the
// API server (Go's net/http and TLS, HTTP/2 as the API server prefers, no Python at all). It
// decodes the review's uid, answers "allowed", and counts what it served at /healthz.
//
//	go build -o webhook-go . && ./webhook-go 127.0.0.1:PORT tls.crt tls.key
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
)

var served, conns atomic.Int64

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: webhook-go ADDR CERT KEY")
		os.Exit(2)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var review struct {
			Request struct {
				UID string `json:"uid"`
			} `json:"request"`
		}
		if err == nil {
			err = json.Unmarshal(body, &review)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":%q,"allowed":true}}`,
			review.Request.UID)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"status":"ok","served":%d,"connections":%d}`, served.Load(), conns.Load())
	})
	srv := &http.Server{Addr: os.Args[1], Handler: mux, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}}
	if err := srv.ListenAndServeTLS(os.Args[2], os.Args[3]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
