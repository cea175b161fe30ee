package telemetry

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/chaperone-dev/chaperone/event"
)

// MaxLineSize is the longest audit log line readers accept. Write shortens
// the values of a record that would be longer (and marks it truncated).
const MaxLineSize = 1 << 20

// ErrClosed is returned by writes to a closed AuditLog.
var ErrClosed = errors.New("telemetry: audit log closed")

// AuditLog appends events to a JSON Lines file. It is safe for concurrent
// use; lines are never interleaved.
type AuditLog struct {
	path string

	mu     sync.Mutex
	f      *os.File // nil when writing to a plain io.Writer
	w      *bufio.Writer
	buf    bytes.Buffer
	enc    *json.Encoder
	closed bool
	err    error // the first write error; once set, nothing more is written
	// pending counts the lines buffered since the last successful flush:
	// they are lost, and counted, if the next write fails.
	pending uint64

	lost atomic.Uint64

	redact func(string) string // nil: records are written as they are
}

// SetRedactor makes every later record pass its free text (command lines,
// URLs, paths) through redact, which replaces the secrets it finds. Call
// it before the first Write.
func (a *AuditLog) SetRedactor(redact func(string) string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.redact = redact
}

// OpenAuditLog opens path for appending, creating its parent directories
// (0700) and the file (0600) as needed. If the file ends in a partial line
// (a crash mid-write), a newline is added so the next record starts a line
// of its own.
func OpenAuditLog(path string) (*AuditLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("telemetry: create audit log directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("telemetry: open audit log: %w", err)
	}
	if err := endLine(f, path); err != nil {
		f.Close()
		return nil, err
	}
	a := newAuditLog(f)
	a.f, a.path = f, path
	return a, nil
}

// endLine appends a newline to f if its last byte is not one.
func endLine(f *os.File, path string) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("telemetry: stat audit log: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() == 0 {
		return nil
	}
	r, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("telemetry: read audit log: %w", err)
	}
	defer r.Close()
	last := make([]byte, 1)
	if _, err := r.ReadAt(last, fi.Size()-1); err != nil {
		return fmt.Errorf("telemetry: read audit log: %w", err)
	}
	if last[0] != '\n' {
		if _, err := f.Write([]byte{'\n'}); err != nil {
			return fmt.Errorf("telemetry: write audit log: %w", err)
		}
	}
	return nil
}

func newAuditLog(w io.Writer) *AuditLog {
	a := &AuditLog{w: bufio.NewWriterSize(w, 64<<10)}
	a.enc = json.NewEncoder(&a.buf)
	a.enc.SetEscapeHTML(false) // URLs stay readable; the log is not HTML
	return a
}

// Path returns the file's path.
func (a *AuditLog) Path() string { return a.path }

// Write appends one line for e to the buffer; Flush, Run or Close write it
// out. After a write error every later call returns that error.
func (a *AuditLog) Write(e *event.Event) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return ErrClosed
	case a.err != nil:
		a.lost.Add(1)
		return a.err
	}
	r := RecordOf(e)
	if a.redact != nil {
		r = r.redacted(a.redact)
	}
	a.buf.Reset()
	if err := a.enc.Encode(r); err != nil {
		// Record holds only strings, numbers and text marshalers that
		// cannot fail; keep the log going but say so.
		return fmt.Errorf("telemetry: encode audit record: %w", err)
	}
	if a.buf.Len() > MaxLineSize {
		a.buf.Reset()
		if err := a.enc.Encode(r.truncated()); err != nil {
			return fmt.Errorf("telemetry: encode audit record: %w", err)
		}
	}
	if _, err := a.w.Write(a.buf.Bytes()); err != nil {
		a.fail(err, 1)
		return a.err
	}
	a.pending++
	return nil
}

// fail records the first write error; the lines still buffered and extra
// more are lost with it, and counted.
func (a *AuditLog) fail(err error, extra uint64) {
	a.err = fmt.Errorf("telemetry: write audit log: %w", err)
	a.lost.Add(a.pending + extra)
	a.pending = 0
}

// Flush writes buffered lines to the file.
func (a *AuditLog) Flush() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushLocked()
}

func (a *AuditLog) flushLocked() error {
	if a.closed {
		return ErrClosed
	}
	if a.err != nil {
		return a.err
	}
	if err := a.w.Flush(); err != nil {
		a.fail(err, 0)
		return a.err
	}
	a.pending = 0
	return nil
}

// Err returns the first write error, or nil while the log is healthy.
func (a *AuditLog) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Lost returns how many events were not written because of a write error.
func (a *AuditLog) Lost() uint64 { return a.lost.Load() }

// Run writes every event of sub until its channel is closed, flushing
// whenever the channel is momentarily empty and at the end. sub should be
// Lossless.
//
// After a write error Run keeps draining the channel without writing (a
// lossless subscriber that stopped reading would block publishers and the
// Bus's Close forever), counts those events in Lost, and returns the error
// when the channel closes. Callers that must not run unaudited watch Err.
func (a *AuditLog) Run(sub *event.Subscription) error {
	ch := sub.Events()
	var first error
	for e := range ch {
		if err := a.Write(e); err != nil && first == nil {
			first = err
		}
		if len(ch) == 0 {
			if err := a.Flush(); err != nil && first == nil {
				first = err
			}
		}
	}
	if err := a.Flush(); err != nil && first == nil {
		first = err
	}
	return first
}

// Close flushes and closes the file. It is idempotent and safe on an
// AuditLog that never wrote; Run must have returned first.
func (a *AuditLog) Close() error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	err := a.flushLocked()
	a.closed = true
	if a.f != nil {
		if cerr := a.f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("telemetry: close audit log: %w", cerr)
		}
	}
	return err
}
