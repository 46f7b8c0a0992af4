package adv31bimporttestdecl

import "testing"

type lease struct{ name string }

var time = 3

func TestX(t *testing.T) { _ = lease{}; _ = time }
