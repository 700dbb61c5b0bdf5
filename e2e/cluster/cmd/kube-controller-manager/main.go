// kube-controller-manager, built from Kubernetes' own cmd/kube-controller-manager/app
// package (as k8s.io/kubernetes/cmd/kube-controller-manager/controller-manager.go does).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	command := app.NewControllerManagerCommand()
	os.Exit(cli.Run(command))
}
