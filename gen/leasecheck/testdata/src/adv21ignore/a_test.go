package adv21ignore

import "testing"

func TestX(t *testing.T) {
	//lease:ignore escape nothing here either // want `//lease:ignore escape suppresses nothing here`
}
