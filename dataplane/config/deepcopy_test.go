package config

import (
	"fmt"
	"reflect"
	"testing"
)

// fillEveryField sets every field reachable from v to a non-zero value that
// differs from field to field: pointers are allocated, slices get two
// elements, maps two entries. A field added to Config later is filled too,
// so a copy that forgets it fails TestDeepCopyCopiesEveryField.
func fillEveryField(t *testing.T, v reflect.Value, path string, n *int) {
	t.Helper()
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("%s=%d", path, *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillEveryField(t, v.Elem(), path, n)
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				t.Fatalf("%s.%s is unexported: extend fillEveryField", path, f.Name)
			}
			fillEveryField(t, v.Field(i), path+"."+f.Name, n)
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fillEveryField(t, v.Index(i), fmt.Sprintf("%s[%d]", path, i), n)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for i := range 2 {
			k := reflect.New(v.Type().Key()).Elem()
			fillEveryField(t, k, fmt.Sprintf("%s{key%d}", path, i), n)
			e := reflect.New(v.Type().Elem()).Elem()
			fillEveryField(t, e, fmt.Sprintf("%s[%d]", path, i), n)
			v.SetMapIndex(k, e)
		}
	default:
		t.Fatalf("%s has kind %s: extend fillEveryField", path, v.Kind())
	}
}

// checkZeroFree fails for every field reachable from v that is still zero.
func checkZeroFree(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	if v.IsZero() {
		t.Errorf("%s is zero", path)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		checkZeroFree(t, v.Elem(), path)
	case reflect.Struct:
		for i := range v.NumField() {
			checkZeroFree(t, v.Field(i), path+"."+v.Type().Field(i).Name)
		}
	case reflect.Slice:
		for i := range v.Len() {
			checkZeroFree(t, v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

// checkNoSharedMemory fails for every pointer, slice or map of b that
// points at the memory of the same field of a.
func checkNoSharedMemory(t *testing.T, a, b reflect.Value, path string) {
	t.Helper()
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return
		}
		if a.Pointer() == b.Pointer() {
			t.Errorf("%s: the copy shares the original's pointer", path)
			return
		}
		checkNoSharedMemory(t, a.Elem(), b.Elem(), path)
	case reflect.Struct:
		for i := range a.NumField() {
			checkNoSharedMemory(t, a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name)
		}
	case reflect.Slice:
		if a.Len() == 0 || b.Len() == 0 {
			return
		}
		if a.Pointer() == b.Pointer() {
			t.Errorf("%s: the copy shares the original's backing array", path)
			return
		}
		for i := range min(a.Len(), b.Len()) {
			checkNoSharedMemory(t, a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Map:
		if !a.IsNil() && a.Pointer() == b.Pointer() {
			t.Errorf("%s: the copy shares the original's map", path)
		}
	}
}

// reportDifferences names every field where the copy b differs from a.
func reportDifferences(t *testing.T, a, b reflect.Value, path string) {
	t.Helper()
	switch {
	case reflect.DeepEqual(a.Interface(), b.Interface()):
	case a.Kind() == reflect.Pointer && !a.IsNil() && !b.IsNil():
		reportDifferences(t, a.Elem(), b.Elem(), path)
	case a.Kind() == reflect.Struct:
		for i := range a.NumField() {
			reportDifferences(t, a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name)
		}
	case a.Kind() == reflect.Slice && a.Len() == b.Len():
		for i := range a.Len() {
			reportDifferences(t, a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	default:
		t.Errorf("DeepCopy changed %s: got %#v, want %#v", path, b.Interface(), a.Interface())
	}
}

// TestDeepCopyCopiesEveryField fills every field of a Config, whatever
// fields it has today, and checks that DeepCopy returns an equal value that
// shares no memory with it. A copy that leaves a field out (as
// perModel.unknownModel once was) fails here, not in a user's ConfigMap.
func TestDeepCopyCopiesEveryField(t *testing.T) {
	var c Config
	n := 0
	fillEveryField(t, reflect.ValueOf(&c).Elem(), "Config", &n)
	checkZeroFree(t, reflect.ValueOf(c), "Config")

	d := c.DeepCopy()
	if !reflect.DeepEqual(&c, d) {
		reportDifferences(t, reflect.ValueOf(c), reflect.ValueOf(*d), "Config")
		t.FailNow()
	}
	checkNoSharedMemory(t, reflect.ValueOf(&c), reflect.ValueOf(d), "Config")
	if (*Config)(nil).DeepCopy() != nil {
		t.Error("the copy of a nil Config must be nil")
	}
}

// TestMarshalKeepsUnknownModel: the operator writes its ConfigMap with
// Marshal, which copies the config first; the unknown-model action must
// survive it.
func TestMarshalKeepsUnknownModel(t *testing.T) {
	c := validConfig()
	c.RateLimits.PerModel.UnknownModel = UnknownModel{Action: UnknownModelCharge, ChargeAs: c.RateLimits.PerModel.Overrides[0].Model}
	data, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.RateLimits.PerModel.UnknownModel; got != c.RateLimits.PerModel.UnknownModel {
		t.Fatalf("after Marshal and Parse unknownModel = %+v, want %+v", got, c.RateLimits.PerModel.UnknownModel)
	}
}
