//go:build race

package sandbox

// raceEnabled: the race detector maps terabytes of shadow memory, so a worker built
// with it cannot have its data segment bounded.
const raceEnabled = true
