package plugin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

const (
	// MaxLine is the longest request line Serve reads; a longer line is
	// skipped unanswered (Chaperone then applies the plugin's on_error).
	MaxLine = 4 << 20
	// MaxInFlight is how many calls of decide Serve runs at once; further
	// requests wait to be read.
	MaxInFlight = 64
)

// Serve reads requests from r, one JSON line each, calls decide for each and
// writes its answer to w as one JSON line with the request's id.
//
// decide is called concurrently, from up to MaxInFlight goroutines, so it
// must be safe for concurrent use; answers are written as each call
// returns, possibly out of order, never interleaved. A verdict whose word is
// empty or unknown is sent as a deny that says why (fail closed). A line
// that is not a JSON object with a numeric id is skipped; a request whose
// event does not decode is answered with a deny.
//
// Serve returns nil when r reaches EOF, after every answer has been written;
// it returns the first read or write error otherwise.
func Serve(r io.Reader, w io.Writer, decide func(Event) Verdict) error {
	var (
		wmu  sync.Mutex
		werr error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, MaxInFlight)
	)
	answer := func(id uint64, v Verdict) {
		line, err := json.Marshal(Response{ID: id, Verdict: v})
		if err != nil { // cannot happen with these field types; stay closed anyway
			line, _ = json.Marshal(Response{ID: id, Verdict: Verdict{Verdict: Deny, Reason: "plugin: encode answer"}})
		}
		line = append(line, '\n')
		wmu.Lock()
		defer wmu.Unlock()
		if werr == nil {
			if _, err := w.Write(line); err != nil {
				werr = fmt.Errorf("plugin: write answer: %w", err)
			}
		}
	}
	failed := func() error {
		wmu.Lock()
		defer wmu.Unlock()
		return werr
	}

	br := bufio.NewReaderSize(r, 64<<10)
	var rerr error
	for {
		line, err := readLine(br, MaxLine)
		if line != nil {
			if id, ev, ok, derr := decodeRequest(line); ok {
				if derr != nil {
					answer(id, Verdict{Verdict: Deny, Reason: "plugin: cannot decode event: " + derr.Error()})
				} else {
					sem <- struct{}{}
					wg.Add(1)
					go func() {
						defer func() { <-sem; wg.Done() }()
						answer(id, checked(decide(ev)))
					}()
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				rerr = fmt.Errorf("plugin: read request: %w", err)
			}
			break
		}
		if failed() != nil {
			break
		}
	}
	wg.Wait()
	if rerr != nil {
		return rerr
	}
	return failed()
}

// checked turns a verdict that cannot be sent as given into a deny.
func checked(v Verdict) Verdict {
	switch {
	case v.Verdict == "":
		return Verdict{Verdict: Deny, Reason: "plugin: empty verdict", Rule: v.Rule}
	case !ValidVerdict(v.Verdict):
		return Verdict{Verdict: Deny, Reason: fmt.Sprintf("plugin: unknown verdict %q", v.Verdict), Rule: v.Rule}
	}
	return v
}

// decodeRequest decodes one request line. ok is false when the line has no
// usable id (it cannot be answered); err is set when the id is usable but
// the event is not.
func decodeRequest(line []byte) (id uint64, ev Event, ok bool, err error) {
	var raw struct {
		ID    json.RawMessage `json:"id"`
		Event json.RawMessage `json:"event"`
	}
	if json.Unmarshal(line, &raw) != nil || len(raw.ID) == 0 {
		return 0, Event{}, false, nil
	}
	if json.Unmarshal(raw.ID, &id) != nil || id == 0 {
		return 0, Event{}, false, nil
	}
	if len(raw.Event) == 0 || bytes.Equal(raw.Event, []byte("null")) {
		return id, Event{}, true, errors.New("no event")
	}
	if err := json.Unmarshal(raw.Event, &ev); err != nil {
		return id, Event{}, true, err
	}
	return id, ev, true, nil
}

// readLine returns the next line without its newline. A line longer than
// max is consumed and returned as nil. At the end of input it returns the
// last unterminated line, if any, with io.EOF.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+1 { // +1: the newline
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			return nil, err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		if err != nil && len(line) == 0 {
			return nil, err
		}
		return line, err
	}
}
