package dash

import (
	"context"

	"github.com/pidispatch/pidispatch/fleetstate"
)

// FleetDollars feeds the page's dollar windows from the fleet's dollar
// budget, the one the workers reserve in.
func FleetDollars(d *fleetstate.Dollars) DollarWindows { return fleetDollars{d} }

type fleetDollars struct{ d *fleetstate.Dollars }

func (f fleetDollars) DollarWindows(ctx context.Context) ([]DollarWindow, error) {
	ws, err := f.d.Windows(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]DollarWindow, 0, len(ws))
	for _, w := range ws {
		out = append(out, DollarWindow{Window: w.Name, UsedMicros: w.SpentMicros + w.ReservedMicros, CapMicros: w.CapMicros})
	}
	return out, nil
}
