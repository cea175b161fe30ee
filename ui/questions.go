package ui

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/chaperone-dev/chaperone/internal/ask"
)

// askBook keeps the questions waiting in the sessions whose control
// sockets are in dir, as last seen, and tells the pages of each new one
// and of each one gone (answered, timed out, abandoned).
type askBook struct {
	dir      string
	asked    func(ask.Question) // a question is new
	answered func(ask.Question) // a question is gone

	mu sync.Mutex
	qs map[string]ask.Question
	// cancel stops the watch while pages are connected.
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newAskBook(dir string) *askBook {
	return &askBook{dir: dir, qs: map[string]ask.Question{}, asked: func(ask.Question) {}, answered: func(ask.Question) {}}
}

// add records q and reports it when it is new.
func (b *askBook) add(q ask.Question) {
	b.mu.Lock()
	_, known := b.qs[q.ID]
	b.qs[q.ID] = q
	b.mu.Unlock()
	if !known {
		b.asked(q)
	}
}

// remove forgets question id and reports it gone.
func (b *askBook) remove(id string) (ask.Question, bool) {
	b.mu.Lock()
	q, ok := b.qs[id]
	delete(b.qs, id)
	b.mu.Unlock()
	if ok {
		b.answered(q)
	}
	return q, ok
}

// refresh asks every session for its questions.
func (b *askBook) refresh() {
	if b.dir == "" {
		return
	}
	list, err := ask.List(b.dir)
	if err != nil && len(list) == 0 {
		return // a socket that answers wrong; keep what is known
	}
	now := map[string]bool{}
	for _, q := range list {
		now[q.ID] = true
		b.add(q)
	}
	b.mu.Lock()
	var gone []string
	for id := range b.qs {
		if !now[id] {
			gone = append(gone, id)
		}
	}
	b.mu.Unlock()
	for _, id := range gone {
		b.remove(id)
	}
}

// answer answers question id through its session's control socket.
func (b *askBook) answer(id string, allow, always bool) (ask.Question, error) {
	if b.dir == "" {
		return ask.Question{}, ask.ErrUnknown
	}
	b.mu.Lock()
	q, ok := b.qs[id]
	b.mu.Unlock()
	if !ok {
		b.refresh()
		b.mu.Lock()
		q, ok = b.qs[id]
		b.mu.Unlock()
	}
	if err := ask.Send(b.dir, id, allow, always, ask.FromLiveView); err != nil {
		if errors.Is(err, ask.ErrUnknown) {
			b.remove(id)
		}
		return q, err
	}
	b.mu.Lock()
	delete(b.qs, id) // the caller reports it answered
	b.mu.Unlock()
	if !ok {
		q.ID = id
	}
	return q, nil
}

func (b *askBook) all() []ask.Question {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]ask.Question, 0, len(b.qs))
	for _, q := range b.qs {
		out = append(out, q)
	}
	slices.SortFunc(out, func(x, y ask.Question) int { return x.Asked.Compare(y.Asked) })
	return out
}

func (b *askBook) of(session string) []ask.Question {
	out := []ask.Question{}
	for _, q := range b.all() {
		if q.Session == session {
			out = append(out, q)
		}
	}
	return out
}

func (b *askBook) count(session string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, q := range b.qs {
		if q.Session == session {
			n++
		}
	}
	return n
}

// Watch timing: how often the ask directory is looked at for new
// sessions, and how often the questions are listed to see which are gone.
const (
	askRescan    = 250 * time.Millisecond
	askReconcile = time.Second
)

// watch attends every session's questions (ask.Watch) until the returned
// function is called.
func (b *askBook) watch() (release func()) {
	if b.dir == "" {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.mu.Lock()
	b.cancel = cancel
	b.mu.Unlock()
	b.wg.Add(2)
	go func() {
		defer b.wg.Done()
		ask.Watch(ctx, b.dir, askRescan, b.add, nil)
	}()
	go func() {
		defer b.wg.Done()
		t := time.NewTicker(askReconcile)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				b.refresh()
			}
		}
	}()
	return cancel
}

// stop ends a watch and waits for it.
func (b *askBook) stop() {
	b.mu.Lock()
	if b.cancel != nil {
		b.cancel()
	}
	b.mu.Unlock()
	b.wg.Wait()
}
