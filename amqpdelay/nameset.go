package amqpdelay

import "sync"

// maxNames bounds the exchange names a nameSet holds; a name beyond them is simply not
// remembered (the Publisher then checks or isolates it again each time).
const maxNames = 1024

// nameSet is a set of at most maxNames exchange names (limit, when larger), safe for
// concurrent use (refusals: the exchanges that took a publish on the connection, those with a
// topic permission, the targets a delayed publish was permitted to). The zero value is empty and ready to use.
type nameSet struct {
	mu    sync.RWMutex
	names map[string]struct{}
	limit int // set before first use; <= maxNames: maxNames
}

func (s *nameSet) add(name string) {
	s.mu.Lock()
	if s.names == nil {
		s.names = make(map[string]struct{})
	}
	if len(s.names) < max(s.limit, maxNames) {
		s.names[name] = struct{}{}
	}
	s.mu.Unlock()
}

func (s *nameSet) has(name string) bool {
	s.mu.RLock()
	_, ok := s.names[name]
	s.mu.RUnlock()
	return ok
}

func (s *nameSet) remove(name string) {
	s.mu.Lock()
	delete(s.names, name)
	s.mu.Unlock()
}

// clear empties the set.
func (s *nameSet) clear() {
	s.mu.Lock()
	s.names = nil
	s.mu.Unlock()
}
