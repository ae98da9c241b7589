package graph

// Unregister removes a backend registered by a test.
func Unregister(name string) {
	regMu.Lock()
	defer regMu.Unlock()
	delete(registry, name)
}
