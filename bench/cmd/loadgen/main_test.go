package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/bench/loadgen"
	"github.com/chaperone-dev/chaperone/bench/origin"
)

func TestRunPrintsJSON(t *testing.T) {
	o, err := origin.Start("127.0.0.1:0", t.TempDir(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	// A proxy in the environment must not be used with -direct.
	env := func(k string) string {
		if k == "HTTPS_PROXY" {
			return "http://127.0.0.1:1"
		}
		return ""
	}
	tests := []struct {
		name string
		args []string
		mode string
	}{
		{"load", []string{"-proto", "h2", "-c", "2", "-d", "500ms", "-warmup", "0s"}, "load"},
		{"hold", []string{"-hold", "5", "-hold-settle", "0s", "-hold-idle", "0s"}, "hold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			args := append([]string{"-target", o.URL(origin.Path1K), "-direct", "-ca", o.CAFile}, tt.args...)
			if err := run(context.Background(), args, env, &out, io.Discard); err != nil {
				t.Fatal(err)
			}
			var res loadgen.Result
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("output %q: %v", out.String(), err)
			}
			if res.Mode != tt.mode || res.Via != "direct" || res.Requests == 0 || res.Errors != 0 {
				t.Errorf("result %+v", res)
			}
		})
	}
}

func TestRunRefuses(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no target", nil, "-target is required"},
		{"a name, never resolved", []string{"-target", "https://origin.test:443/"}, "not IP:port"},
		{"plain http", []string{"-target", "http://127.0.0.1:1/"}, "not an https URL"},
		{"bad proto", []string{"-target", "https://127.0.0.1:1/", "-proto", "h4"}, "want h1, h2 or h3"},
		{"h3 new connection each", []string{"-target", "https://127.0.0.1:1/", "-proto", "h3", "-keepalive=false"}, "keep-alive load only"},
		{"h3 held idle", []string{"-target", "https://127.0.0.1:1/", "-proto", "h3", "-hold", "10"}, "keep-alive load only"},
		{"proxy by name", []string{"-target", "https://127.0.0.1:1/", "-proxy", "http://proxy.test:3128"}, "not IP:port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), tt.args, func(string) string { return "" }, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
