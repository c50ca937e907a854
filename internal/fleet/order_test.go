package fleet

import "testing"

// TestSpare: of the room a waiting model has now, a later model may take
// what the waiting one would have beyond its need however its busy
// holders fall idle, and nothing it needs.
func TestSpare(t *testing.T) {
	for _, c := range []struct {
		name      string
		now, need int64
		later     []int64
		want      int64
	}{
		{"enough now: what is beyond the need", 10, 6, nil, 4},
		{"just enough now: nothing", 6, 6, []int64{5}, 0},
		{"short, one busy holder gives back more than enough", 5, 6, []int64{5}, 4},
		{"short, one busy holder gives back just enough", 3, 8, []int64{5}, 0},
		{"short by 3 of a 5: 2 spare", 3, 6, []int64{5}, 2},
		{"no more spare than there is now", 2, 8, []int64{10}, 2},
		{"whichever falls idle first: the least overshoot", 4, 10, []int64{7, 6}, 0},
		{"two needed together", 1, 10, []int64{4, 4, 4}, 1},
		{"the busy holders never give back enough: all of it", 3, 10, []int64{2}, 3},
		{"nothing now", 0, 6, []int64{5, 5}, 0},
		{"others keep more than there is", -1, 6, []int64{5, 5}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Spare(c.now, c.need, c.later); got != c.want {
				t.Errorf("Spare(%d, %d, %v) = %d, want %d", c.now, c.need, c.later, got, c.want)
			}
		})
	}
}
