package fleet

// Status is how the fleet fares with a model, in the word the fleet page,
// the catalog and `modelserve model list` show: parked, no node fits,
// waiting for room, on demand, ready or starting.
func (h ModelHealth) Status() string {
	switch {
	case h.Parked:
		return "parked"
	case h.Unplaceable && !h.HardwareExists:
		return "no node fits"
	case h.Unplaceable, h.Placement != "":
		// A placement text on a model that is not unplaceable is room
		// being made: replicas stopping to give it back.
		return "waiting for room"
	case h.Want == 0:
		return "on demand"
	case h.Ready >= h.Want:
		return "ready"
	}
	return "starting"
}
