#!/bin/sh
# placeholder until the command lands
exit 77
