//go:build !race

package floor

const raceEnabled = false
