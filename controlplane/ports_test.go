package main

import "testing"

// The ports `up` hands to its components are never ones the kernel could also
// hand to an outgoing connection in the meantime.
func TestFreePortsAreDistinctAndOutsideTheEphemeralAndNodePortRanges(t *testing.T) {
	low, high := portWindow()
	if high > 30000 {
		t.Fatalf("window [%d, %d) reaches into the NodePort range", low, high)
	}
	ports, err := freePorts(12)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < low || p >= high {
			t.Errorf("port %d outside [%d, %d)", p, low, high)
		}
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
