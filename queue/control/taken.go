package control

import "sync"

// taken counts the requests a service is serving, so that its stop can
// wait for them. Unlike a sync.WaitGroup, it may take a request while a
// stop waits: the subscriptions a stop drains still deliver what was
// pending, and those requests are served too.
type taken struct {
	mu   sync.Mutex
	n    int
	idle sync.Cond
}

func (t *taken) take() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *taken) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 {
		t.idle.Broadcast()
	}
	t.mu.Unlock()
}

// wait returns when no request is being served.
func (t *taken) wait() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.idle.L = &t.mu
	for t.n > 0 {
		t.idle.Wait()
	}
}
