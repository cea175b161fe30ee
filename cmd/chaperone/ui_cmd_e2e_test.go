package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// chaperone ui serves the sessions of the log it is given, on the address
// it is given, to whoever opened its one-time URL only.
func TestUICommand(t *testing.T) {
	w := newWorld(t)
	mustSucceed(t, w.run("true"))
	id := w.sessionStart().Session

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "ui", "--log", w.log, "--ui-listen", "127.0.39.1:0")
	cmd.Env = baseEnv(w.dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("chaperone ui after an interrupt: %v; stderr: %s", err, stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Error("chaperone ui still runs 10 s after an interrupt")
			cmd.Process.Kill()
		}
	}()

	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("no URL line: %v; stderr: %s", err, stderr.String())
	}
	link, ok := strings.CutPrefix(strings.TrimSpace(line), "live view: ")
	if !ok || !strings.HasPrefix(link, "http://127.0.39.1:") || !strings.Contains(link, "/?token=") {
		t.Fatalf("URL line %q", line)
	}
	base := link[:strings.Index(link, "/?")]

	get := func(c *http.Client, url string) (int, []byte) {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, _ := get(http.DefaultClient, base+"/api/sessions"); code != http.StatusUnauthorized {
		t.Errorf("without the token: status %d, want 401", code)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	if code, b := get(c, link); code != http.StatusOK || !strings.Contains(string(b), "<html") {
		t.Fatalf("the URL: status %d: %.200s", code, b)
	}
	code, b := get(c, base+"/api/sessions")
	if code != http.StatusOK {
		t.Fatalf("sessions: status %d: %s", code, b)
	}
	var list struct {
		Sessions []struct {
			ID      string `json:"id"`
			Running bool   `json:"running"`
		} `json:"sessions"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Sessions) != 1 || list.Sessions[0].ID != id || list.Sessions[0].Running {
		t.Errorf("sessions %s, want the one ended session %s", b, id)
	}
	// The token was good once.
	if code, _ := get(http.DefaultClient, link); code != http.StatusUnauthorized {
		t.Errorf("the URL a second time: status %d, want 401", code)
	}
}
