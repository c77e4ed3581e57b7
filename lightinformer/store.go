package lightinformer

import (
	"sync"
	"sync/atomic"

	toolscache "k8s.io/client-go/tools/cache"
)

// tellingStore is what the reflector writes to: it keeps each change in the indexer,
// then tells the handler, as an informer's processing loop would, one change at a
// time. A relist (Replace) tells of what it added, of every object it kept as an
// update, and of what it dropped as a deletion whose final state is unknown; a resync
// replays every object as an update. The first Replace is the initial list.
type tellingStore struct {
	mu      sync.Mutex // orders the watch's changes and the resync timer's replays
	indexer toolscache.Indexer
	handler toolscache.ResourceEventHandler
	synced  atomic.Bool
}

var _ toolscache.ReflectorStore = &tellingStore{}

func (s *tellingStore) Add(obj any) error {
	obj = stripManagedFields(obj)
	s.mu.Lock()
	defer s.mu.Unlock()
	old, existed, err := s.indexer.Get(obj)
	if err != nil {
		return err
	}
	if err := s.indexer.Add(obj); err != nil {
		return err
	}
	if existed {
		s.handler.OnUpdate(old, obj)
	} else {
		s.handler.OnAdd(obj, false)
	}
	return nil
}

func (s *tellingStore) Update(obj any) error { return s.Add(obj) }

func (s *tellingStore) Delete(obj any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.indexer.Delete(obj); err != nil {
		return err
	}
	s.handler.OnDelete(obj)
	return nil
}

func (s *tellingStore) Replace(list []any, resourceVersion string) error {
	for i := range list {
		list[i] = stripManagedFields(list[i])
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	before := map[string]any{}
	for _, obj := range s.indexer.List() {
		if key, err := toolscache.MetaNamespaceKeyFunc(obj); err == nil {
			before[key] = obj
		}
	}
	if err := s.indexer.Replace(list, resourceVersion); err != nil {
		return err
	}
	initial := !s.synced.Load()
	for _, obj := range list {
		key, err := toolscache.MetaNamespaceKeyFunc(obj)
		if err != nil {
			continue
		}
		if old, ok := before[key]; ok {
			delete(before, key)
			s.handler.OnUpdate(old, obj)
		} else {
			s.handler.OnAdd(obj, initial)
		}
	}
	for key, old := range before {
		s.handler.OnDelete(toolscache.DeletedFinalStateUnknown{Key: key, Obj: old})
	}
	s.synced.Store(true)
	return nil
}

func (s *tellingStore) Resync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, obj := range s.indexer.List() {
		s.handler.OnUpdate(obj, obj)
	}
	return nil
}
